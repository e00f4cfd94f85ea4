"""`soulflow run` with LOG_FORMAT=json, as a subprocess: the log is JSON lines, and a line
logged while a local chat's message is answered names the chat and the run; the configured
API key never appears."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.doctor.conftest import closed_port_url
from tests.e2e.harness import Daemon, base_env, wait_for
from tests.fakes.openai_api import FakeOpenAIThread

API_KEY = "sk-or-v1-logs-test-key-5f2e9d1c0b"


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_failover_warning_names_the_chat_and_the_run(tmp_path: Path,
                                                      fake_llm: FakeOpenAIThread) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # the main provider is down: the failover logs it in the middle of the chat's run
    env = base_env(workspace, LOG_FORMAT="json", PROVIDER="phi4_local",
                   PHI4_BASE_URL=closed_port_url("/v1"), PROVIDER_MAX_RETRIES="0",
                   PROVIDER_FALLBACKS="openrouter", OPENROUTER_API_KEY=API_KEY,
                   OPENROUTER_BASE_URL=fake_llm.base_url)
    daemon = Daemon(workspace, env, tmp_path / "daemon.log")
    try:
        daemon.start()
        fake_llm.script_reply("hello from the fallback")
        message_id = daemon.say("hi", chat_id="logchat")
        reply = daemon.wait_reply(message_id, chat_id="logchat")
        assert "hello from the fallback" in json.dumps(reply)
        down = wait_for(lambda: [e for e in json_lines(daemon.log())
                                 if "is down for" in e["msg"]], what="the failover warning")
        assert daemon.stop() == 0
    finally:
        daemon.close()
    [warning] = down
    assert warning["level"] == "warning" and warning["logger"] == "soulflow.providers.failover"
    assert warning["chat"] == "local:logchat" and warning["run_id"].startswith("run_")
    assert "phi4_local" in warning["msg"]
    text = daemon.log()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("=====")]
    assert lines and all(line.startswith("{") for line in lines), lines[:3]
    assert API_KEY not in text
