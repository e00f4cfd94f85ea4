"""Dead letters (outbound and inbound) and channel cursors, against every backend."""

from __future__ import annotations

from soulflow.contracts import IntakeStage
from tests.backends.conftest import Harness
from tests.backends.helpers import outbound


async def test_outbound_dead_letters_keep_the_whole_reply(harness: Harness) -> None:
    backend = await harness.open()
    first = outbound("a", "lost reply", inbound_key="telegram:a:1")
    second = outbound("b", "another")
    letter = await backend.dlq.add(first, retry_count=8, error="403 blocked by user")
    await backend.dlq.add(second, retry_count=1, error="400 chat not found")
    assert letter.to_dict()["metadata"]["inbound_key"] == "telegram:a:1"
    backend = await harness.reopen(backend)
    entries = await backend.dlq.entries()
    assert [(e.message.message_id, e.message.content, e.retry_count, e.error)
            for e in entries] == [
        (first.message_id, "lost reply", 8, "403 blocked by user"),
        (second.message_id, "another", 1, "400 chat not found")]
    assert entries[0].message.inbound_key == "telegram:a:1"
    replay = entries[0].to_outbound()
    assert replay.content == "lost reply" and replay.inbound_key is None
    assert replay.delivery.replayed_from_dlq_at == entries[0].at
    assert await backend.dlq.count() == 2
    assert await backend.dlq.remove([first.message_id, "out_none"]) == 1
    assert [e.message.message_id for e in await backend.dlq.entries()] == [second.message_id]
    assert await backend.dlq.purge() == 1
    assert await backend.dlq.count() == 0


async def test_recent_outbound_dead_letters_are_the_last_ones_in_order(
        harness: Harness) -> None:
    backend = await harness.open()
    letters = [await backend.dlq.add(outbound("a", f"r{n}"), retry_count=1, error="x")
               for n in range(5)]
    assert [e.message.message_id for e in await backend.dlq.recent(2)] == \
        [letters[3].message.message_id, letters[4].message.message_id]
    assert len(await backend.dlq.recent(20)) == 5


async def test_inbound_dead_letters_are_redacted_and_listed_newest_last(
        harness: Harness) -> None:
    backend = await harness.open()
    for n in range(3):
        await backend.inbound_dlq.add(provider="telegram", chat_id="c1", message_id=str(n),
                                      sender_id="u1", stage=IntakeStage.SEAL,
                                      error="boom", content=f"#{n}", key=f"telegram:c1:{n}")
    leaked = await backend.inbound_dlq.add(
        provider="telegram", chat_id="c1", message_id="9", sender_id="u1",
        stage=IntakeStage.PARSE, error="bad", content="/secret set API_KEY sk-live-123456789")
    assert "sk-live-123456789" not in leaked.content
    backend = await harness.reopen(backend)
    assert await backend.inbound_dlq.count() == 4
    entries = await backend.inbound_dlq.entries()
    assert [e.message_id for e in entries] == ["0", "1", "2", "9"]
    assert "sk-live-123456789" not in entries[-1].content
    assert entries[0].stage == "seal" and entries[0].key == "telegram:c1:0"
    assert [e.message_id for e in await backend.inbound_dlq.recent(2)] == ["2", "9"]
    assert await backend.inbound_dlq.purge() == 4
    assert await backend.inbound_dlq.entries() == []


async def test_cursors_persist_per_channel(harness: Harness) -> None:
    backend = await harness.open()
    assert await backend.cursors.load("telegram") == {}
    assert await backend.cursors.update("telegram", {"offset": 41, "primed": True})
    assert await backend.cursors.update("telegram", {"offset": 42})
    assert await backend.cursors.update("slack", {"ts": {"C1": "1700000000.000100"}})
    backend = await harness.reopen(backend)
    assert await backend.cursors.load("telegram") == {"offset": 42, "primed": True}
    assert await backend.cursors.load("slack") == {"ts": {"C1": "1700000000.000100"}}


def _cap(store: object, entries: int) -> None:
    """Lower a dead-letter queue's cap for the test (file: its `RecordLog`; redis: itself)."""
    target = getattr(store, "log", store)
    target._max_entries = entries  # type: ignore[attr-defined]


async def _moved_aside(store: object) -> list[int]:
    """How many entries each queue moved aside at its cap holds (dated files / keys)."""
    log = getattr(store, "log", None)
    if log is not None:  # files: <name>-<stamp>.jsonl beside the queue
        path = log._file.path
        return [len(p.read_text().splitlines())
                for p in sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"))]
    client, key = store._client, store._key  # type: ignore[attr-defined]
    return [int(await client.llen(k)) for k in sorted(await client.keys(f"{key}:*"))]


async def test_a_full_dead_letter_queue_moves_aside_whole_and_starts_again(
        harness: Harness) -> None:
    """Reads of a DLQ stay bounded: at its cap the queue is moved aside under a dated name,
    kept whole (never dropped), and new letters start an empty one."""
    backend = await harness.open()
    _cap(backend.dlq, 3)
    _cap(backend.inbound_dlq, 2)
    letters = [await backend.dlq.add(outbound("a", f"r{n}"), retry_count=1, error="x")
               for n in range(4)]
    for n in range(3):
        await backend.inbound_dlq.add(provider="telegram", chat_id="c1", message_id=str(n),
                                      sender_id="u1", stage=IntakeStage.SEAL, error="boom")
    assert [e.message.message_id for e in await backend.dlq.entries()] == [
        letters[3].message.message_id]
    assert await backend.dlq.count() == 1 and await backend.inbound_dlq.count() == 1
    assert [e.message_id for e in await backend.inbound_dlq.entries()] == ["2"]
    assert await _moved_aside(backend.dlq) == [3]
    assert await _moved_aside(backend.inbound_dlq) == [2]
    backend = await harness.reopen(backend)
    assert await backend.dlq.count() == 1 and await backend.inbound_dlq.count() == 1
