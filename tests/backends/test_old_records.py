"""Records stored before the messages' metadata became typed records still load, and are
written back byte for byte.

`old_records/` holds what the code of 28a62a3 wrote, through its own stores (each file is in
the compacted form that code rewrote on every start): the inbound journal (Slack, Discord,
Telegram and cron messages, with thread context, platform keys and attachments), the outbox
(announced approvals, task steps and statuses, a file reply, a message tool's message, a
replayed and a maybe-sent one, a Slack thread reply) and the outbound DLQ (with the inbound key
each answered). On files, loading them and rewriting them (compaction, a DLQ removal) must
give the same bytes; on Redis, whatever the old code stored for a record is what is stored now,
and what it stored loads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from soulflow.backends.file.backend import FileBackend
from soulflow.backends.redis.keys import partition_of
from soulflow.contracts import (
    ApprovalRef,
    CronOccurrence,
    Delivery,
    InboundMessage,
    IntakeStage,
    ReplyOptions,
    TaskStatusRef,
    TaskStepRef,
)
from soulflow.conversation.quarantine import Quarantine
from soulflow.security.dead_letters import build_inbound_letter
from tests.backends.conftest import Harness

OLD = Path(__file__).parent / "old_records"
AT = 1700000500.25  # the clock the old records were written under: no seen id expires
STORED = {"inbound.jsonl": "bus/inbound.jsonl", "outbox.jsonl": "bus/outbox.jsonl",
          "outbound-dlq.jsonl": "dlq/outbound.jsonl"}


def old(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (OLD / name).read_text("utf-8").splitlines()]


def old_inbound() -> list[dict[str, Any]]:
    return [record["msg"] for record in old("inbound.jsonl") if record["op"] == "in"]


def old_outbound() -> list[dict[str, Any]]:
    return [record["msg"] for record in old("outbox.jsonl") if record["op"] == "put"]


def old_quarantine_raw(message: dict[str, Any]) -> str:
    """The `raw` the old code kept of a quarantined message (its stored form but the text)."""
    raw = json.dumps({k: v for k, v in message.items() if k != "text"}, ensure_ascii=True,
                     default=repr)
    return build_inbound_letter(at=AT, redact=None, provider="", chat_id="", message_id="",
                                sender_id="", stage="", error="", raw=raw).raw


async def nothing(keys: list[str]) -> None:
    pass


def assert_typed_inbound(messages: list[InboundMessage]) -> None:
    by_id = {m.message_id: m for m in messages}
    slack = by_id["1700000002.000200"]
    assert slack.thread_context == ("alice: earlier line", "bob: [secret:API_KEY]")
    assert slack.platform_data == {"ts": "1700000002.000200", "polled": "thread",
                                   "bot_thread": True}
    assert by_id["1700000004.000400"].thread_context == ()
    assert by_id["1700000003.000300"].thread_context is None
    assert by_id["556"].platform_data["guild_id"] == "777"
    cron = by_id["cron-job_1-1700038800"]
    assert cron.cron == CronOccurrence("job_1", "2023-11-15T09:00:00+00:00")
    assert cron.platform_data == {}
    assert by_id["m1"].attachments[0].file_id == "F1"


async def test_the_file_stores_read_old_records_and_write_their_bytes_back(
        tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    for name, where in STORED.items():
        (runtime / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(OLD / name, runtime / where)
    backend = FileBackend(runtime, node_id="node-a", fsync="always", clock=lambda: AT)
    pending = await backend.inbound.pending()  # opening the journal compacts it
    entries = await backend.outbox.pending()  # so does opening the outbox
    letters = await backend.dlq.entries()
    backend.inbound.journal.compact()
    backend.outbox.outbox.compact()
    assert await backend.dlq.remove(["out_none"]) == 0  # rewrites every letter
    quarantine = Quarantine(backend.inbound_dlq, mark_seen=nothing)  # the journal stays as read
    for message in pending:
        await quarantine.record(message, IntakeStage.PROCESS, "boom")
    quarantined = await backend.inbound_dlq.entries()
    seen_ids = [r["key"] for r in old("inbound.jsonl") if r["op"] == "seen"]
    assert seen_ids and all([await backend.inbound.is_seen(key) for key in seen_ids])
    await backend.stop()

    for name, where in STORED.items():
        expected = (OLD / name).read_bytes()
        if name == "inbound.jsonl":  # its seen ids moved to inbound-seen.sqlite3 (above)
            expected = b"".join(line for line in expected.splitlines(keepends=True)
                                if not line.startswith(b'{"op":"seen"'))
        assert (runtime / where).read_bytes() == expected, name
    assert [letter.raw for letter in quarantined] == [
        old_quarantine_raw(message) for message in old_inbound()]

    assert_typed_inbound(pending)
    sent = {e.message.message_id[-2:]: e.message for e in entries}
    assert sent["01"].announces == ApprovalRef("run_1", "ap_1")
    assert sent["01"].options == ReplyOptions(
        as_file=True, filename="reply.txt",
        note="The answer is 9,000 characters long, so it is attached as reply.txt.")
    assert sent["02"].announces == TaskStepRef("task_1", "step_2")
    assert sent["03"].announces == TaskStatusRef("task_1")
    assert sent["04"].from_chat == "slack:C1" and sent["04"].announces is None
    assert sent["05"].delivery == Delivery(maybe_sent=True, replayed_from_dlq_at=1700000050.75)
    assert sent["06"].delivery.maybe_sent and sent["06"].inbound_key == "telegram:42:8"
    assert sent["07"].options == ReplyOptions(thread_reply=True)
    assert [e.in_flight for e in entries] == [False] * 5 + [True] + [False] * 2
    first = letters[0].message
    assert first.inbound_key == "telegram:42:11" and first.options.as_file
    assert first.delivery.maybe_sent
    assert letters[1].message.announces == ApprovalRef("run_3", "ap_3")
    replay = letters[3].to_outbound()
    assert replay.inbound_key is None and replay.delivery == Delivery(
        maybe_sent=True, replayed_from_dlq_at=letters[3].at)


async def test_redis_stores_and_loads_old_records_as_the_old_code_did(
        redis_harness: Harness) -> None:
    backend = await redis_harness.open()
    client, keys = backend.client, backend.keys

    for record in old_inbound():  # accepted now, stored as the old code stored it
        assert await backend.inbound.accept(InboundMessage.from_dict(record))
        part = partition_of(f"{record['provider']}:{record['chat_id']}", keys.partitions)
        [(_, fields)] = [entry for entry in await client.xrange(keys.stream(part))
                         if json.loads(entry[1][b"m"])["message_id"] == record["message_id"]]
        assert fields[b"m"].decode() == json.dumps(record)
        key = f"{record['provider']}:{record['chat_id']}:{record['message_id']}"
        held = (await client.hget(keys.inbound_pending, key)).decode()
        assert held.split("|", 2)[2] == json.dumps(record)
    assert_typed_inbound(await backend.inbound.pending())

    for record in old_outbound():  # stored by the old code: it loads, and dies as it did
        raw = json.dumps(record)
        await client.hset(keys.outbox_messages, record["message_id"], raw)
        entry = await backend.outbox.get(record["message_id"])
        assert entry is not None and json.dumps(entry.message.to_dict()) == raw
        letter = await backend.dlq.add(entry.message, retry_count=2, error="gone")
        metadata = dict(record["metadata"])
        if record["inbound_key"]:
            metadata["inbound_key"] = record["inbound_key"]
        old_letter = {"at": letter.at, "provider": record["provider"],
                      "chat_id": record["chat_id"], "message_id": record["message_id"],
                      "reply_to": record["reply_to"], "thread_id": record["thread_id"],
                      "retry_count": 2, "error": "gone", "content": record["content"],
                      "metadata": metadata}
        assert (await client.lrange(keys.dlq_outbound, -1, -1))[0].decode() == \
            json.dumps(old_letter)
    await backend.dlq.purge()

    dead = old("outbound-dlq.jsonl")
    await client.rpush(keys.dlq_outbound, *(json.dumps(record) for record in dead))
    letters = await backend.dlq.entries()
    assert [json.dumps(letter.to_dict()) for letter in letters] == \
        [json.dumps(record) for record in dead]
    assert letters[1].message.announces == ApprovalRef("run_3", "ap_3")
    assert await backend.dlq.remove([dead[0]["message_id"]]) == 1
    assert await backend.dlq.count() == len(dead) - 1
