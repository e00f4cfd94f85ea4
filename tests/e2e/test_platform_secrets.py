"""The secrets canary on every platform: nothing pasted in a chat is stored in plaintext."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_platforms import own_daemon
from tests.e2e.test_secrets import files_containing
from tests.fakes.openai_api import FakeOpenAIThread
from tests.security.samples import JWT, OPENAI_KEY

PASSWORD = "Platform-Canary-Pass-77"


@pytest.mark.parametrize("name", ["slack", "telegram", "discord"])
def test_platform_messages_are_sealed_before_anything_is_stored(
        name: str, tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with own_daemon(name, tmp_path, fake_llm) as live:
        posted = live.driver.post(f"password: {PASSWORD} key {OPENAI_KEY} token {JWT}")
        reply = live.wait(lambda: next((p for p in live.posts(posted.chat)
                                        if p.text.startswith("echo: password:")), None),
                          "the echo of the sealed message")
        assert "{{secret:inbound." in reply.text
        seen = [live.daemon.api("GET", "/api/state").text,
                json.dumps([r.json for r in fake_llm.requests]),
                json.dumps([p.text for p in live.posts()])]
        live.daemon.stop()
        canaries = [PASSWORD, OPENAI_KEY, JWT]
        assert files_containing(live.daemon.workspace, canaries) == []
        assert [c[:10] for c in canaries if c in live.daemon.log()] == []
        for text in seen:
            assert [c[:10] for c in canaries if c in text] == []
