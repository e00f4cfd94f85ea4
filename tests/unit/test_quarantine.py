"""Poison input: normalised at the edge, or quarantined (redacted) so the channel moves on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from soulflow.backends.file.dead_letters import InboundDeadLetters
from soulflow.channels.base import Command
from soulflow.channels.normalize import normalize_inbound, normalize_text, scrub_surrogates
from soulflow.channels.poison import poison_message
from soulflow.contracts import Attachment, InboundMessage
from soulflow.conversation.quarantine import APOLOGY
from soulflow.security.dead_letters import strict_redact
from tests.unit.test_conversation import drained, msg, rig, settle  # noqa: F401 - rig: a fixture
from tests.unit.test_intake_lookups import accept_failing

TOKEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"


class BrokenSealer:
    """A sealer whose vault cannot store (disk full): `seal` raises for marked messages."""

    def __init__(self) -> None:
        self.vault = None

    def seal(self, message: InboundMessage) -> None:
        if "boom" in message.text:
            raise OSError("No space left on device")

    async def seal_off_loop(self, message: InboundMessage) -> None:
        self.seal(message)


def test_normalize_text_replaces_surrogates_and_drops_controls() -> None:
    assert normalize_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert normalize_text("x\x00y\x1b[31mz\x7f\x85") == "xy[31mz"
    assert normalize_text("keep\ttabs\nand lines\r\nCRLF\r") == "keep\ttabs\nand lines\nCRLF\n"
    assert normalize_text("plain ✓ text 한국어") == "plain ✓ text 한국어"


def test_normalize_inbound_covers_every_text_field() -> None:
    message = InboundMessage(
        provider="chat", chat_id="c\ud8001", message_id="m\x001", sender_id="u1",
        text="t\ud800", sender_name="N\udc00\x07", thread_id="th\ud800",
        attachments=[Attachment(name="f\ud800.txt", url="http://x/\x01")],
        thread_context=("line \ud800", "bob: \x02hi"),
        platform_data={"nested": [{"k\ud800": "v\x02"}], "n": 3})
    normalize_inbound(message)
    record = json.dumps(message.to_dict(), ensure_ascii=False).encode("utf-8")  # strict
    assert b"\\u" not in record and message.key == "chat:c\ufffd1:m1"
    assert message.sender_name == "N\ufffd" and message.attachments[0].name == "f\ufffd.txt"
    assert message.thread_context == ("line \ufffd", "bob: hi")
    assert message.platform_data == {"nested": [{"k\ufffd": "v"}], "n": 3}


def test_scrub_surrogates_keeps_utf16_length_and_everything_else() -> None:
    raw = {"message": {"text": "a\ud800b\x01", "entities": [{"offset": 3, "length": 1}]}}
    assert scrub_surrogates(raw) == {"message": {"text": "a\ufffdb\x01",
                                                 "entities": [{"offset": 3, "length": 1}]}}


def test_the_inbound_dlq_redacts_secrets_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "dlq" / "inbound.jsonl"
    letters = InboundDeadLetters(path, redact=lambda t: t.replace("operator-pw", "[REDACTED]"))
    letters.add(provider="chat", chat_id="c1", message_id="m1", sender_id="u", stage="seal",
                error="OSError: disk full", content=f"/secret set GH {TOKEN} and operator-pw",
                raw=json.dumps({"text": f"token={TOKEN}"}), key="chat:c1:m1")
    letters.add(provider="chat", chat_id="c1", message_id="m2", sender_id="u", stage="parse",
                error="bad \ud800", content="x" * 10_000)
    letters.close()
    text = path.read_text("utf-8")
    assert TOKEN not in text and "operator-pw" not in text
    reopened = InboundDeadLetters(path)
    assert len(reopened) == 2
    first, second = reopened.entries()
    assert first.content == "/secret set GH [REDACTED]" and first.stage == "seal"
    assert len(second.content) == 2000 and second.error == "bad \ufffd"
    assert [e.message_id for e in reopened.recent(1)] == ["m2"]
    assert strict_redact("password: hunter22!") != "password: hunter22!"


async def test_a_sealing_error_is_quarantined_and_the_next_message_answered(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build(sealer=BrokenSealer())
    fresh = await conversation.ingest(adapter, [msg(1, f"boom {TOKEN}"), msg(2, "fine")])
    assert [m.message_id for m in fresh] == ["m2"]
    assert adapter.committed == ["m1", "m2"]  # the cursor passes it: it is recorded
    replies = await settle(adapter, 2)
    assert replies == [APOLOGY, "echo: fine"]
    [letter] = await bus.inbound_dlq.entries()
    assert (letter.stage, letter.message_id, letter.error) == (
        "seal", "m1", "OSError: No space left on device")
    assert TOKEN not in letter.content and TOKEN not in letter.raw
    assert await drained(bus) and await bus.inbound.is_seen("chat:c1:m1")
    assert await conversation.ingest(adapter, [msg(1, f"boom {TOKEN}")]) == []  # redelivered: seen
    assert await bus.inbound_dlq.count() == 1


async def test_poison_from_an_adapter_is_recorded_before_the_commit(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    poison = poison_message("chat", message_id="update-7", error=ValueError("bad json"),
                            raw={"update_id": 7, "message": "not an object"})
    await conversation.ingest(adapter, [poison, msg(8, "after")])
    assert await settle(adapter, 1) == ["echo: after"]
    [letter] = await bus.inbound_dlq.entries()
    assert (letter.stage, letter.message_id, letter.error) == (
        "parse", "update-7", "ValueError: bad json")
    assert "not an object" in letter.raw
    assert adapter.committed == ["update-7", "m8"]
    # read again (a crash before the commit): recorded once
    await conversation.ingest(adapter, [poison])
    assert await bus.inbound_dlq.count() == 1


async def test_a_command_that_crashes_is_quarantined_once_not_replayed(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig

    async def explode(command: Command, message: InboundMessage) -> str:
        raise RuntimeError("renderer crashed")

    conversation = build(commands={"render": explode})
    await conversation.ingest(adapter, [msg(1, "/render graph"), msg(2, "after")])
    replies = await settle(adapter, 2)
    assert replies == [APOLOGY, "echo: after"]
    [letter] = await bus.inbound_dlq.entries()
    assert (letter.stage, letter.error) == ("process", "RuntimeError: renderer crashed")
    assert await drained(bus)  # completed as failed: no replay at boot
    await build.__self__.restart_bus()
    assert await build(claiming=False).resume_pending() == 0


async def test_a_journal_write_error_is_quarantined(rig, monkeypatch: Any) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    accept_failing(bus, monkeypatch,
                   lambda message: OSError("EIO") if message.message_id == "m1" else None)
    await conversation.ingest(adapter, [msg(1, "one"), msg(2, "two")])
    assert await settle(adapter, 2) == [APOLOGY, "echo: two"]
    assert [e.stage for e in await bus.inbound_dlq.entries()] == ["journal"]
    await asyncio.sleep(0)


async def test_a_quarantine_is_announced_as_a_live_event(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    events: list[tuple[str, dict[str, Any]]] = []
    conversation = build(sealer=BrokenSealer(),
                         on_event=lambda kind, data: events.append((kind, data)))
    await conversation.ingest(adapter, [msg(1, "boom")])
    assert [(k, d["stage"], d["message_id"]) for k, d in events
            if k == "inbound.quarantined"] == [("inbound.quarantined", "seal", "m1")]
