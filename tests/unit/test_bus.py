"""Inbound journal, outbox, DLQ and the dispatcher's retry/backoff/order behaviour."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from soulflow.backends.file.backend import FileBackend
from soulflow.backends.file.dead_letters import DeadLetterQueue, FileDeadLetters
from soulflow.backends.file.inbound import InboundJournal
from soulflow.backends.file.outbox import FileOutbox, Outbox
from soulflow.bus.bus import MessageBus
from soulflow.bus.dispatcher import OutboundDispatcher
from soulflow.bus.retry import RetryPolicy
from soulflow.contracts import (
    InboundMessage,
    OutboundMessage,
    OutboxEntry,
    ReplyOptions,
    SendError,
    SendResult,
)


def inbound(i: int, chat: str = "c1") -> InboundMessage:
    return InboundMessage(provider="local", chat_id=chat, message_id=f"m{i}", sender_id="u",
                          text=f"hello {i}", received_at=1000.0 + i)


def outbound(i: int, chat: str = "c1") -> OutboundMessage:
    return OutboundMessage(provider="fake", chat_id=chat, content=f"reply {i}",
                           message_id=f"o{i}", inbound_key=f"local:{chat}:m{i}")


# -- inbound journal ------------------------------------------------------------------------

def test_inbound_dedupe_pending_and_completion_survive_restart(tmp_path: Path) -> None:
    path = tmp_path / "inbound.jsonl"
    journal = InboundJournal(path)
    assert journal.accept(inbound(1)) and journal.accept(inbound(2))
    assert not journal.accept(inbound(1))
    journal.complete("local:c1:m1", "answered")
    journal.mark_seen(["local:c1:old"])
    journal.close()
    reopened = InboundJournal(path)
    assert [m.message_id for m in reopened.pending()] == ["m2"]
    assert reopened.is_seen("local:c1:m1") and reopened.is_seen("local:c1:old")
    assert not reopened.accept(inbound(2))


def test_inbound_seen_ids_expire_by_ttl_but_pending_never(tmp_path: Path) -> None:
    now = [1000.0]
    journal = InboundJournal(tmp_path / "i.jsonl", seen_ttl_s=100, clock=lambda: now[0])
    journal.accept(inbound(1))
    journal.accept(inbound(2))
    journal.complete("local:c1:m1", "answered")
    now[0] = 5000.0
    assert journal.expire_seen() == 2
    assert not journal.is_seen("local:c1:m1")
    assert journal.is_seen("local:c1:m2")  # still owed an answer: the journal knows it
    assert not journal.accept(inbound(2))


def test_inbound_torn_record_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "i.jsonl"
    journal = InboundJournal(path)
    journal.accept(inbound(1))
    journal.close()
    with open(path, "ab") as handle:
        handle.write(b'{"op":"in","msg":{"provider":"lo')
    assert [m.message_id for m in InboundJournal(path).pending()] == ["m1"]


# -- outbox and DLQ -------------------------------------------------------------------------

def test_outbox_pending_attempts_and_answered_keys_survive_restart(tmp_path: Path) -> None:
    path = tmp_path / "outbox.jsonl"
    box = Outbox(path)
    for i in range(3):
        assert box.put(outbound(i))
    assert not box.put(outbound(0))
    box.record_attempt("o1", 2, 1234.0, "boom")
    box.mark_sent("o0")
    box.close()
    reopened = Outbox(path)
    assert [e.message.message_id for e in reopened.pending()] == ["o1", "o2"]
    assert reopened.get("o1").attempts == 2 and reopened.get("o1").next_at == 1234.0
    assert reopened.has_answered("local:c1:m0")  # sent, then compacted: still known


def test_dlq_add_list_remove_purge(tmp_path: Path) -> None:
    dlq = DeadLetterQueue(tmp_path / "dlq" / "outbound.jsonl", clock=lambda: 99.0)
    dlq.add(outbound(1), retry_count=3, error="invalid_auth")
    dlq.add(outbound(2), retry_count=8, error="gave up")
    entries = dlq.entries()
    assert [e.message.message_id for e in entries] == ["o1", "o2"]
    assert set(entries[0].to_dict()) == {"at", "provider", "chat_id", "message_id", "reply_to",
                                         "thread_id", "retry_count", "error", "content",
                                         "metadata"}
    assert entries[0].message.content == "reply 1" and entries[0].at == 99.0
    assert dlq.remove(["o1"]) == 1 and len(dlq) == 1
    assert DeadLetterQueue(tmp_path / "dlq" / "outbound.jsonl").entries()[0].message.message_id \
        == "o2"
    assert dlq.purge() == 1 and len(dlq) == 0


# -- dispatcher -----------------------------------------------------------------------------

@dataclass
class FakeSender:
    """A channel whose send outcome per call is scripted: None = ok, or a SendError."""

    script: list[SendError | None] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    calls: int = 0
    send_interval_s: float = 0.0
    gate: asyncio.Event | None = None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        outcome = self.script.pop(0) if self.script else None
        if outcome is not None:
            raise outcome
        self.sent.append(message.content)
        return SendResult(platform_message_ids=[f"p{len(self.sent)}"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(round(delay, 3))
        self.now += delay
        await asyncio.sleep(0)


def make_dispatcher(tmp_path: Path, sender: FakeSender, clock: FakeClock,
                    policy: RetryPolicy | None = None) -> OutboundDispatcher:
    return OutboundDispatcher(
        FileOutbox(Outbox(tmp_path / "outbox.jsonl", clock=clock.time)),
        FileDeadLetters(DeadLetterQueue(tmp_path / "dlq.jsonl", clock=clock.time)),
        lambda provider: sender if provider == "fake" else None,
        policy=policy or RetryPolicy(max_attempts=3, inline_retries=1, inline_delay_s=0.5,
                                     base_delay_s=10, jitter=0),
        clock=clock.time, sleep=clock.sleep, rand=lambda: 0.5)


async def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)


async def test_dispatch_success_marks_sent(tmp_path: Path) -> None:
    sender, clock = FakeSender(), FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    dispatcher.publish(outbound(1))
    await wait_until(lambda: sender.sent == ["reply 1"] and len(dispatcher.outbox.outbox) == 0)
    await dispatcher.stop(1)


async def test_a_reply_the_chat_already_shows_is_recorded_but_not_sent(tmp_path: Path) -> None:
    """A streamed reply whose message already holds its final text: stored, marked sent, its
    listeners told (an approval's platform ids), and no call to the platform."""
    sender, clock = FakeSender(), FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    seen: list[list[str]] = []
    dispatcher.sent_listeners.append(lambda message, result: seen.append(
        result.platform_message_ids))
    await dispatcher.start()
    message = outbound(1)
    message.options = ReplyOptions(edit_of="p9", shown=True)
    dispatcher.publish(message)
    dispatcher.publish(outbound(2))
    await wait_until(lambda: sender.sent == ["reply 2"])
    assert sender.calls == 1 and seen == [["p9"], ["p1"]]
    assert len(dispatcher.outbox.outbox) == 0
    await dispatcher.stop(1)


async def test_transient_errors_retry_inline_then_back_off(tmp_path: Path) -> None:
    sender = FakeSender(script=[SendError("503"), SendError("503"), SendError("503")])
    clock = FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    dispatcher.publish(outbound(1))
    await wait_until(lambda: sender.sent == ["reply 1"])
    # round 1: try, 0.5 s inline, try -> backoff 10 s; round 2: try (fails), 0.5 s, try (ok)
    assert clock.sleeps == [0.5, 10.0, 0.5]
    await dispatcher.stop(1)


async def test_retry_after_is_honoured_as_a_floor(tmp_path: Path) -> None:
    sender = FakeSender(script=[SendError("429", retry_after=42.0)])
    clock = FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    dispatcher.publish(outbound(1))
    await wait_until(lambda: sender.sent == ["reply 1"])
    assert clock.sleeps == [42.0]  # no inline retry before the platform's wait
    # the chat's pace holds for the streams' edits too (bus/pacing.py)
    assert dispatcher.pacer.ready_at("fake:c1", 0.0) >= 1000.0 + 42.0
    await dispatcher.stop(1)


async def test_permanent_error_goes_to_dlq_at_once(tmp_path: Path) -> None:
    sender = FakeSender(script=[SendError("invalid_auth", permanent=True)])
    clock = FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    dispatcher.publish(outbound(1))
    await wait_until(lambda: len(dispatcher.dlq.dlq) == 1)
    letter = dispatcher.dlq.dlq.entries()[0]
    assert "invalid_auth" in letter.error and letter.message.content == "reply 1"
    assert sender.calls == 1 and len(dispatcher.outbox.outbox) == 0
    await dispatcher.stop(1)


async def test_exhausted_retries_go_to_dlq(tmp_path: Path) -> None:
    sender = FakeSender(script=[SendError("down")] * 10)
    clock = FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    dispatcher.publish(outbound(1))
    await wait_until(lambda: len(dispatcher.dlq.dlq) == 1)
    assert sender.calls == 6  # 3 rounds x (1 + 1 inline)
    assert dispatcher.dlq.dlq.entries()[0].retry_count == 3
    assert clock.sleeps == [0.5, 10.0, 0.5, 20.0, 0.5]
    await dispatcher.stop(1)


async def test_unknown_channel_is_a_permanent_error(tmp_path: Path) -> None:
    sender, clock = FakeSender(), FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    message = outbound(1)
    message.provider = "nowhere"
    dispatcher.publish(message)
    await wait_until(lambda: len(dispatcher.dlq.dlq) == 1)
    assert "no channel named 'nowhere'" in dispatcher.dlq.dlq.entries()[0].error
    await dispatcher.stop(1)


async def test_order_per_chat_is_kept_through_a_backoff(tmp_path: Path) -> None:
    sender = FakeSender(script=[SendError("x"), SendError("x")])
    clock = FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    for i in range(5):
        dispatcher.publish(outbound(i))
    await wait_until(lambda: len(sender.sent) == 5)
    assert sender.sent == [f"reply {i}" for i in range(5)]
    await dispatcher.stop(1)


async def test_slow_chat_does_not_block_other_chats(tmp_path: Path) -> None:
    blocked = FakeSender(gate=asyncio.Event())
    free = FakeSender()
    clock = FakeClock()
    dispatcher = OutboundDispatcher(
        FileOutbox(Outbox(tmp_path / "o.jsonl")),
        FileDeadLetters(DeadLetterQueue(tmp_path / "d.jsonl")),
        lambda provider: blocked if provider == "slow" else free, concurrency=2,
        clock=clock.time, sleep=clock.sleep)
    await dispatcher.start()
    dispatcher.publish(OutboundMessage(provider="slow", chat_id="a", content="stuck"))
    for i in range(20):
        dispatcher.publish(OutboundMessage(provider="fast", chat_id=f"c{i}", content=str(i)))
    await wait_until(lambda: len(free.sent) == 20)
    blocked.gate.set()
    await wait_until(lambda: blocked.sent == ["stuck"])
    await dispatcher.stop(1)


async def test_per_chat_pacing_uses_the_channel_interval(tmp_path: Path) -> None:
    sender, clock = FakeSender(send_interval_s=1.0), FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    for i in range(3):
        dispatcher.publish(outbound(i))
    await wait_until(lambda: len(sender.sent) == 3)
    assert clock.sleeps == [1.0, 1.0]
    await dispatcher.stop(1)


async def test_pending_entries_are_sent_after_a_restart(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.jsonl")
    for i in range(3):
        box.put(outbound(i))
    box.close()
    sender, clock = FakeSender(), FakeClock()
    dispatcher = make_dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    await wait_until(lambda: len(sender.sent) == 3)
    assert sender.sent == ["reply 0", "reply 1", "reply 2"]
    await dispatcher.stop(1)


def test_backoff_policy_bounds_and_jitter() -> None:
    policy = RetryPolicy(base_delay_s=1, max_delay_s=30, jitter=0.2)
    assert policy.delay(1, rand=lambda: 0.5) == 1
    assert policy.delay(3, rand=lambda: 0.0) == pytest.approx(3.2)
    assert policy.delay(3, rand=lambda: 1.0) == pytest.approx(4.8)
    assert policy.delay(20, rand=lambda: 1.0) == 30
    assert policy.delay(1, retry_after=100, rand=lambda: 0.5) == 100


async def test_bus_replay_puts_dead_letters_back(tmp_path: Path) -> None:
    bus = MessageBus(FileBackend(tmp_path, node_id="test"))
    await bus.dlq.add(outbound(1), retry_count=1, error="x")
    await bus.dlq.add(outbound(2), retry_count=1, error="y")
    assert await bus.replay_dlq(["o2"]) == 1
    assert [e.message.message_id for e in await bus.outbox.pending()] == ["o2"]
    assert [e.message.message_id for e in await bus.dlq.entries()] == ["o1"]
    assert await bus.replay_dlq() == 1 and await bus.dlq.count() == 0
    assert (await bus.refresh_stats()).outbox_pending == 2
    await bus.stop(1)
    await bus.backend.stop()


class FlakyOutbox(FileOutbox):
    """The file outbox with a switch that makes every call fail, as a lost Redis does."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__(outbox)
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("store unreachable")

    async def put(self, message: OutboundMessage) -> bool:
        self._check()
        return await super().put(message)

    async def get(self, message_id: str) -> OutboxEntry | None:
        self._check()
        return await super().get(message_id)


async def test_a_failing_store_holds_replies_back_in_order_and_loses_none(
        tmp_path: Path) -> None:
    """While the outbox store fails, published replies wait (a turn awaiting its reply's
    storing waits too); when it answers again they are stored and sent in publish order."""
    sender = FakeSender()
    outbox = FlakyOutbox(Outbox(tmp_path / "outbox.jsonl"))
    dispatcher = OutboundDispatcher(outbox, FileDeadLetters(DeadLetterQueue(tmp_path / "d")),
                                    lambda provider: sender, store_backoff=(0.001, 0.01))
    await dispatcher.start()
    outbox.down = True
    stored = [dispatcher.publish(outbound(i)) for i in range(5)]
    await wait_until(lambda: dispatcher.store_health.down)
    assert not any(f.done() for f in stored) and dispatcher.unstored == 5
    assert sender.sent == []
    outbox.down = False
    assert await asyncio.gather(*stored) == [True] * 5
    await wait_until(lambda: len(sender.sent) == 5)
    assert sender.sent == [f"reply {i}" for i in range(5)]
    assert not dispatcher.store_health.down and len(outbox.outbox) == 0
    await dispatcher.stop(1)


async def test_replies_the_store_never_took_are_cancelled_at_the_stop_not_left_hanging(
        tmp_path: Path) -> None:
    outbox = FlakyOutbox(Outbox(tmp_path / "outbox.jsonl"))
    dispatcher = OutboundDispatcher(outbox, FileDeadLetters(DeadLetterQueue(tmp_path / "d")),
                                    lambda provider: FakeSender(), store_backoff=(0.001, 0.01))
    await dispatcher.start()
    outbox.down = True
    waiting = dispatcher.publish(outbound(1))
    await wait_until(lambda: dispatcher.store_health.down)
    await dispatcher.stop(0.05)  # the grace passes with the store still down
    assert waiting.cancelled() and dispatcher.unstored == 0
    assert dispatcher.publish(outbound(2)).cancelled()  # after the stop: refused at once


async def test_requeued_entries_go_ahead_of_newer_queued_replies_of_their_chat(
        tmp_path: Path) -> None:
    """Entries a partition change brings (another node's, stored earlier) are sent before
    the replies this node queued for the chat since, behind only the one being sent."""
    sender = FakeSender(gate=asyncio.Event())
    outbox = FileOutbox(Outbox(tmp_path / "outbox.jsonl"))
    dispatcher = OutboundDispatcher(outbox, FileDeadLetters(DeadLetterQueue(tmp_path / "d")),
                                    lambda provider: sender)
    await dispatcher.start()
    for n in (1, 2):  # stored by a node that died: in the outbox, not queued here
        await outbox.put(OutboundMessage(provider="fake", chat_id="c1", content=f"old {n}"))
    for n in (1, 2):
        await dispatcher.publish(OutboundMessage(provider="fake", chat_id="c1",
                                                 content=f"new {n}"))
    await wait_until(lambda: sender.calls == 1)  # "new 1" is being sent
    dispatcher.requeue_pending()
    await wait_until(lambda: dispatcher.queued == 4)
    sender.gate.set()
    await wait_until(lambda: len(sender.sent) == 4)
    assert sender.sent == ["new 1", "old 1", "old 2", "new 2"]
    await dispatcher.stop(1)
