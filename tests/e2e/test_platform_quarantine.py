"""Poison input on Slack, Telegram and Discord: `soulflow run` against the platform fakes.

A lone surrogate (valid JSON, `"\\ud800"`) is normalised at the edge (answered, with
U+FFFD); a message whose sealing fails is quarantined in `runtime/dlq/inbound.jsonl`
(redacted) and the channel moves on; the quarantine survives a kill -9 and nothing is
journaled or answered twice.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.platform_helpers import TelegramDriver
from tests.e2e.test_platforms import Live, fresh_daemon
from tests.fakes.openai_api import FakeOpenAIThread

SECRET = "sk-quarantine0123456789abcdefghijklmnop"  # credential-shaped: sealing stores it
APOLOGY_START = "I could not take in your message safely"


@pytest.fixture(params=["slack", "telegram", "discord"])
def live(request: pytest.FixtureRequest, llm: FakeOpenAIThread,
         tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon(request.param, llm, tmp_path)


def inbound_dlq(workspace: Path) -> list[dict[str, object]]:
    path = workspace / "runtime" / "dlq" / "inbound.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


def break_the_vault(workspace: Path) -> None:
    """Sealing a credential stores it in the vault; a directory where the vault's file
    belongs makes that write fail (as a full or read-only disk would), even for root."""
    vault_file = workspace / "runtime" / "security" / "secrets.json"
    if vault_file.is_file():
        vault_file.unlink()
    vault_file.mkdir(parents=True)


def runtime_files_hold(workspace: Path, needle: bytes) -> list[str]:
    hits = []
    for path in (workspace / "runtime").rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            hits.append(str(path))
    return hits


def test_poison_input_is_quarantined_and_the_channel_keeps_answering(live: Live) -> None:
    driver, daemon, workspace = live.driver, live.daemon, live.workspace

    # 1. a lone surrogate: normalised at the edge and answered, never a crash
    odd = driver.post("lone \ud800 surrogate")
    live.echo(odd, "lone \ufffd surrogate")

    # 2. sealing crashes: quarantined (redacted), the sender told, the next one answered
    break_the_vault(workspace)
    poisoned = driver.post(f"my key is {SECRET}")
    live.wait(lambda: any(t.startswith(APOLOGY_START) for t in live.texts(poisoned.chat)),
              "the quarantine notice")
    after = driver.post("still answering?")
    live.echo(after, "still answering?")
    shutil.rmtree(workspace / "runtime" / "security" / "secrets.json")

    letters = inbound_dlq(workspace)
    assert [(e["provider"], e["stage"]) for e in letters] == [(driver.name, "seal")]
    assert "[REDACTED]" in str(letters[0]["content"])
    assert runtime_files_hold(workspace, SECRET.encode()) == []
    state = daemon.state()
    assert state["queues"]["inbound_dlq"] == 1
    assert state["inbound_dlq"][0]["stage"] == "seal"
    listed = daemon.cli("dlq", "list", "--inbound").stdout.decode()
    assert "seal" in listed and driver.name in listed, listed

    # 3. a kill -9 and a restart: the quarantine stays, nothing comes back or repeats
    live.settle()
    daemon.kill()
    daemon.start()
    driver.wait_ready(daemon)
    later = driver.post("after the restart")
    live.echo(later, "after the restart")
    assert len(inbound_dlq(workspace)) == 1
    assert daemon.state()["queues"]["inbound_dlq"] == 1
    texts = live.texts()
    for text in ("lone \ufffd surrogate", "still answering?", "after the restart"):
        assert texts.count(f"echo: {text}") == 1, (text, texts)
    assert sum(t.startswith(APOLOGY_START) for t in texts) == 1
    assert not any(SECRET in t or "my key is" in t for t in live.user_texts_seen_by_model())
    journal = (workspace / "runtime" / "bus" / "inbound.jsonl").read_bytes()
    journal.decode("utf-8")  # strict: no surrogate or broken byte reached the journal


@pytest.fixture
def telegram(llm: FakeOpenAIThread, tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon("telegram", llm, tmp_path)


@pytest.fixture(params=["slack-polling", "discord"])
def raw_bytes_platform(request: pytest.FixtureRequest, llm: FakeOpenAIThread,
                       tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon(request.param, llm, tmp_path)


def test_non_utf8_bytes_are_read_as_u_fffd_and_answered(raw_bytes_platform: Live) -> None:
    """A body with a byte that is not UTF-8 (the fakes send 0xE9 for "\\udce9") on Slack's
    history poll (REST) and Discord's gateway is read as U+FFFD: the message is answered,
    nothing is quarantined, the connection stays up and the next message is answered too."""
    live = raw_bytes_platform
    latin = live.driver.post("caf\udce9 au lait")
    live.echo(latin, "caf\ufffd au lait")
    after = live.driver.post("next one")
    live.echo(after, "next one")
    assert live.daemon.state()["queues"]["inbound_dlq"] == 0
    assert "Discord connection failed" not in live.daemon.log()


def test_telegram_non_utf8_bytes_and_unparsable_updates(telegram: Live) -> None:
    """Raw invalid UTF-8 on the wire (the fake sends byte 0xE9 for "\\udce9") is read as
    U+FFFD and answered; an update the parser cannot read is quarantined at stage `parse`
    before the offset passes it, and the next message is answered."""
    live, driver = telegram, telegram.driver
    assert isinstance(driver, TelegramDriver)
    latin = driver.post("caf\udce9 au lait")
    live.echo(latin, "caf\ufffd au lait")
    driver.runner.push_raw_update({"update_id": 900_000_002, "message": "not an object"})
    after = driver.post("next one")
    live.echo(after, "next one")
    letters = inbound_dlq(live.workspace)
    assert [(e["stage"], e["message_id"]) for e in letters] == [("parse", "update-900000002")]
    assert "not an object" in str(letters[0]["raw"])
    live.daemon.kill()
    live.daemon.start()
    driver.wait_ready(live.daemon)
    again = driver.post("after the restart")
    live.echo(again, "after the restart")
    assert len(inbound_dlq(live.workspace)) == 1  # the offset had passed it: not read again
