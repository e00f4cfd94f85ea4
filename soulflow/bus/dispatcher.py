"""Deliver outbox entries: in order per chat, concurrently across chats, never lost.

The outbox is the backend's (`backends/base.py` OutboxStore: the file journal, or Redis).
`publish()` hands a message to the "outbox:writer" task (writer.py), which stores it and only
then queues it here for sending. On start and whenever this node's partitions change the
dispatcher queues `pending()`, the entries this node must send; `record_sending()` refusing an
entry means its chat moved to another node, which sends it. A failing store (Redis lost) is
retried with a backoff, the entry staying first in its chat's line.

A chat this node has just taken over may have replies the dead node stored and never sent;
they are older than anything this node answers there. So from the moment the partitions
change until `pending()` has been read and queued, no chat sends: a reply written here in the
meantime waits behind the ones found, instead of overtaking them.

A send is tried inline a few times; if it still fails, the entry stays at the head of its chat's
queue with a backoff deadline (exponential with jitter, never earlier than the platform's
`retry_after`), so the next reply of that chat cannot overtake it. Permanent errors and
exhausted retries move the entry to the DLQ. Waiting never holds a concurrency slot: a chat in
backoff does not slow any other chat.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from soulflow import tracing
from soulflow.backends.base import Completing, Completion, DeadLetterStore, OutboxStore
from soulflow.bus.pacing import ChatPacer, SendBudget, account_edits
from soulflow.bus.retry import RetryPolicy
from soulflow.bus.writer import OutboxWriter, StoreHealth
from soulflow.contracts import EventSink, OutboundMessage, OutboxEntry, SendError, SendResult

log = logging.getLogger(__name__)


class Sender(Protocol):
    """What the dispatcher needs from a channel adapter."""

    async def send(self, message: OutboundMessage) -> SendResult: ...

    @property
    def send_interval_s(self) -> float: ...


def _chat_budget(sender: Sender, chat_id: str) -> SendBudget | None:  # counted, not waited on
    """The chat's budget where the channel declares one (`ChannelAdapter.chat_budget`; a
    plain `Sender` has none)."""
    budget = getattr(sender, "chat_budget", None)
    return budget(chat_id) if budget is not None else None


def _edit_budget(sender: Sender, message: OutboundMessage) -> SendBudget | None:
    """The account's edit budget, for a message that edits one (`ChannelAdapter.edit_budget`)."""
    return getattr(sender, "edit_budget", None) if message.options.edit_of else None


SentListener = Callable[[OutboundMessage, SendResult], None]
# (provider, None) after a successful send attempt, (provider, error) after a failed one:
# the channel health records (channels/health.py) listen
OutcomeListener = Callable[[str, str | None], None]


class OutboundDispatcher:
    def __init__(
        self,
        outbox: OutboxStore,
        dlq: DeadLetterStore,
        resolve_sender: Callable[[str], Sender | None],
        *,
        policy: RetryPolicy | None = None,
        concurrency: int = 16,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        rand: Callable[[], float] = random.random,
        on_event: EventSink | None = None,
        store_backoff: tuple[float, float] = (0.2, 5.0),
        pacer: ChatPacer | None = None,
    ) -> None:
        self.outbox = outbox
        self.dlq = dlq
        self._resolve_sender = resolve_sender
        self.policy = policy or RetryPolicy()
        self._slots = asyncio.Semaphore(concurrency)
        self._clock = clock
        self._injected_sleep = sleep
        self._rand = rand
        self._on_event = on_event or (lambda kind, data: None)
        self.sent_listeners: list[SentListener] = []
        self.outcome_listeners: list[OutcomeListener] = []
        self._queues: dict[str, deque[str]] = {}
        self._queued_ids: set[str] = set()
        self._workers: dict[str, asyncio.Task[None]] = {}
        # shared with the reply streams: a chat's edits and sends keep one pace (pacing.py)
        self.pacer = pacer or ChatPacer(clock)
        self._requeue: asyncio.Task[None] | None = None
        self._rescan = False  # the partitions changed again while `pending()` was read
        self._scanned = asyncio.Event()  # clear: a partitions change is not queued yet
        self._scanned.set()
        self._sending: set[str] = set()  # chats whose head entry is being sent now
        self._stopping = asyncio.Event()
        self._running = False
        self._store_backoff = store_backoff
        self.store_health = StoreHealth()  # the outbox store failed; logged once per outage
        self._writer = OutboxWriter(outbox.store, self._enqueue, self.store_health, self._sleep,
                                    store_backoff)
        self.sent_count = 0
        self.dead_count = 0

    # -- queueing ------------------------------------------------------------------------

    async def start(self) -> None:
        """Queue every entry this node must send (recovery after a restart or a takeover)."""
        self._stopping.clear()
        self._running = True
        self._queues.clear()
        self._queued_ids.clear()
        self._writer.start()
        self._enqueue_pending(await self.outbox.pending())

    def requeue_pending(self) -> None:
        """This node's partitions changed: queue the entries it now holds (the new holder of a
        dead node's chats sends their queued replies, in order), in the "outbox:requeue" task.
        Sends wait until that is done; a change during a read of `pending()` reads it again."""
        if not self._running:
            return
        self._scanned.clear()
        if self._requeue is not None and not self._requeue.done():
            self._rescan = True
            return
        self._requeue = asyncio.create_task(self._requeue_pending(), name="outbox:requeue")

    async def _requeue_pending(self) -> None:
        delay = self._store_backoff[0]
        try:
            while self._running and not self._stopping.is_set():
                self._rescan = False
                try:
                    entries = await self.outbox.pending()
                except Exception as exc:
                    self.store_health.failed("reading the outbox", exc)
                    await self._sleep(delay)
                    delay = min(delay * 2, self._store_backoff[1])
                    continue
                self.store_health.ok()
                self._enqueue_pending(entries)
                if not self._rescan:
                    return
        finally:
            self._scanned.set()

    def publish(self, message: OutboundMessage) -> asyncio.Future[bool]:
        """Hand a message to the writer, which stores it in the outbox, then queues it for
        delivery (once started). The future says whether it was stored (False: an entry with
        its id is already pending); await it where the reply must be durable before going on."""
        return self._writer.publish(message)

    def complete(self, completing: Completing) -> asyncio.Future[list[Completion]] | None:
        """Hand the writer the completion of inbound messages, recorded behind every message
        published before it (in the same round trip as the last of them, on Redis); None
        once the writer has stopped (the caller completes them itself)."""
        if self._writer.closed:
            return None
        return self._writer.complete(completing)

    def _enqueue_pending(self, entries: list[OutboxEntry]) -> None:
        """Queue entries read from `pending()` that are not queued yet. They are older than
        whatever this node queued for their chat since (the writer queues a message the
        moment it is stored, and `pending()` lists in store order): they go ahead of those,
        behind only an entry a worker is sending now."""
        fresh: dict[str, list[str]] = {}
        for entry in entries:
            message = entry.message
            if message.message_id not in self._queued_ids:
                self._queued_ids.add(message.message_id)
                fresh.setdefault(message.chat_key, []).append(message.message_id)
        for key, ids in fresh.items():
            queue = self._queues.setdefault(key, deque())
            at = 1 if key in self._sending and queue else 0
            for offset, message_id in enumerate(ids):
                queue.insert(at + offset, message_id)
            self._start_worker(key)

    def _start_worker(self, key: str) -> None:
        if self._running and key not in self._workers and not self._stopping.is_set():
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"outbound:{key}")

    def _enqueue(self, message: OutboundMessage) -> None:
        if message.message_id in self._queued_ids:
            return
        key = message.chat_key
        self._queued_ids.add(message.message_id)
        self._queues.setdefault(key, deque()).append(message.message_id)
        self._start_worker(key)

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def unstored(self) -> int:
        """Published messages the writer has not stored yet (held back by a failing store)."""
        return self._writer.unstored

    # -- delivery ------------------------------------------------------------------------

    async def _sleep(self, delay: float) -> None:
        if delay <= 0:
            return
        if self._injected_sleep is not None:
            await self._injected_sleep(delay)
            return
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        except TimeoutError:
            pass

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        delay = self._store_backoff[0]
        try:
            while queue and not self._stopping.is_set():
                try:
                    head = queue[0]
                    entry = await self.outbox.get(head)
                    if entry is None:  # already sent or dead (e.g. replayed twice)
                        self._forget(queue, head)
                        continue
                    await self._sleep(self._wait_before(key, entry))
                    if not self._scanned.is_set():
                        await self._scanned.wait()  # older entries may go ahead of this one
                    if self._stopping.is_set():
                        break
                    if queue[0] != head:
                        continue
                    self._sending.add(key)
                    try:
                        async with self._slots:
                            finished = await self._attempt(entry)
                    finally:
                        self._sending.discard(key)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the store failed: the entry stays first in line
                    self.store_health.failed(f"delivering to {key}", exc)
                    await self._sleep(delay)
                    delay = min(delay * 2, self._store_backoff[1])
                    continue
                delay = self._store_backoff[0]
                self.store_health.ok()
                if finished:
                    self._forget(queue, head)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("outbound worker for %s failed; its entries stay in the outbox", key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    def _forget(self, queue: deque[str], message_id: str) -> None:
        if message_id in queue:  # the head, unless a scan put older entries before it
            queue.remove(message_id)
        self._queued_ids.discard(message_id)

    def _wait_before(self, key: str, entry: OutboxEntry) -> float:
        if entry.message.options.shown:
            return 0.0  # nothing goes to the platform
        message = entry.message
        sender = self._resolve_sender(message.provider)
        if sender is None:
            return entry.next_at - self._clock()
        # a chat's budget is counted (the streams leave room in it) but replies do not wait
        # on it: they keep the pace they had before streams existed, the interval and the
        # platform's 429 with its retry_after (a busy Telegram group's replies waiting out a
        # whole minute on the daemon's own count is a change for another day)
        ready = self.pacer.ready_at(key, sender.send_interval_s)
        if (edits := _edit_budget(sender, message)) is not None:
            ready = max(ready, self.pacer.ready_at(account_edits(message.provider), 0.0, edits))
        return max(entry.next_at, ready) - self._clock()

    async def _attempt(self, entry: OutboxEntry) -> bool:
        """One round of inline tries. True when the entry is settled here (sent, dead, or no
        longer this node's to send). Traced, each round is a span in the trace of the turn
        that wrote the reply (its stored traceparent), however late and wherever it runs."""
        if not tracing.active():
            return await self._round(entry, tracing.OFF)
        message = entry.message
        with tracing.span("soulflow.deliver", {
                "soulflow.channel": message.provider, "soulflow.delivery.round":
                entry.attempts + 1, "soulflow.delivery.replayed":
                message.delivery.replayed_from_dlq_at is not None},
                parent=message.trace, kind=tracing.Kind.PRODUCER) as span:
            return await self._round(entry, span)

    async def _round(self, entry: OutboxEntry, span: tracing.Span) -> bool:
        message = entry.message
        sender = self._resolve_sender(message.provider)
        if sender is None:
            span.fail("no_channel")
            await self._bury(entry, f"no channel named {message.provider!r} is configured")
            return True
        if message.options.shown:
            # a streamed reply's message already holds this text: recorded, not sent again
            shown = SendResult(platform_message_ids=[message.options.edit_of])
            await self._delivered(message, shown, span, 0)
            return True
        error: SendError | None = None
        if entry.in_flight:
            # the last run died during a send: let the channel check before sending again
            message.delivery = replace(message.delivery, maybe_sent=True)
        for inline in range(self.policy.inline_retries + 1):
            if not await self.outbox.record_sending(message.message_id):
                log.info("not sending %s: its chat %s moved to another node (or it is gone)",
                         message.message_id, message.chat_key)
                span.set("soulflow.delivery.outcome", "moved")
                return True
            try:
                result = await sender.send(message)
            except SendError as exc:
                error = exc
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an adapter bug must not lose the message
                log.exception("channel %s raised while sending %s", message.provider,
                              message.message_id)
                error = SendError(f"{type(exc).__name__}: {exc}")
            else:
                self._tell_outcome(message.provider, None)
                self.pacer.sent(message.chat_key, _chat_budget(sender, message.chat_id))
                if (edits := _edit_budget(sender, message)) is not None:
                    self.pacer.counted(account_edits(message.provider), edits)
                await self._delivered(message, result, span, inline + 1)
                return True
            self._tell_outcome(message.provider, str(error))
            if error.retry_after is not None:  # the chat's streamed edits wait too
                self.pacer.hold(message.chat_key, error.retry_after)
            if error.permanent:
                span.fail("permanent")
                span.set("soulflow.delivery.outcome", "dead")
                await self._bury(entry, f"permanent error: {error}")
                return True
            if error.retry_after is not None or inline == self.policy.inline_retries:
                break
            await self._sleep(self.policy.inline_delay_s)
        assert error is not None
        rounds = entry.attempts + 1
        span.fail("rate_limited" if error.retry_after is not None else "transient")
        span.set("soulflow.delivery.tries", inline + 1)
        if rounds >= self.policy.max_attempts:
            span.set("soulflow.delivery.outcome", "dead")
            await self._bury(entry, f"gave up after {rounds} rounds of retries: {error}",
                             rounds=rounds)
            return True
        delay = self.policy.delay(rounds, retry_after=error.retry_after, rand=self._rand)
        await self.outbox.record_attempt(message.message_id, rounds, self._clock() + delay,
                                         str(error))
        entry.attempts, entry.next_at = rounds, self._clock() + delay
        span.set("soulflow.delivery.outcome", "retry")
        log.warning("send of %s to %s failed (%s); retry %d in %.1fs", message.message_id,
                    message.chat_key, error, rounds, delay)
        # counted per reason in /metrics, shown on the dashboard's event stream
        self._on_event("outbound.retry", {
            "message_id": message.message_id, "provider": message.provider,
            "chat_id": message.chat_id, "attempt": rounds, "delay_s": round(delay, 2),
            "reason": "rate_limited" if error.retry_after is not None else "transient",
            "error": str(error)[:300]})
        return False

    async def _delivered(self, message: OutboundMessage, result: SendResult,
                         span: tracing.Span, tries: int) -> None:
        span.set("soulflow.delivery.tries", tries)
        span.set("soulflow.delivery.outcome", "sent")
        await self.outbox.mark_sent(message.message_id, result.platform_message_ids)
        self.sent_count += 1
        for listener in self.sent_listeners:
            listener(message, result)
        self._on_event("outbound.sent", {"message_id": message.message_id,
                                         "provider": message.provider,
                                         "chat_id": message.chat_id})

    def _tell_outcome(self, provider: str, error: str | None) -> None:
        for listener in self.outcome_listeners:
            try:
                listener(provider, error)
            except Exception:  # a listener bug must not lose the message
                log.exception("an outbound outcome listener failed")

    async def _bury(self, entry: OutboxEntry, reason: str, *, rounds: int | None = None) -> None:
        message = entry.message
        await self.dlq.add(message, retry_count=rounds if rounds is not None else entry.attempts,
                           error=reason)
        await self.outbox.mark_dead(message.message_id)
        self.dead_count += 1
        log.error("moved %s for %s to the DLQ: %s", message.message_id, message.chat_key, reason)
        self._on_event("outbound.dead", {"message_id": message.message_id,
                                         "provider": message.provider,
                                         "chat_id": message.chat_id, "error": reason})

    # -- lifecycle -----------------------------------------------------------------------

    async def stop(self, timeout: float) -> None:
        """Let sends in flight finish within `timeout`; unsent entries stay in the outbox.
        Published messages the writer could not store by then are logged (the store was
        down for the whole grace period)."""
        await self._writer.stop(timeout)
        self._stopping.set()
        self._scanned.set()  # a worker waiting for a read of `pending()` stops instead
        self._running = False
        workers = list(self._workers.values())
        if workers:
            _, still_running = await asyncio.wait(workers, timeout=timeout)
            for task in still_running:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        if self._requeue is not None and not self._requeue.done():
            self._requeue.cancel()
            await asyncio.gather(self._requeue, return_exceptions=True)
        self._requeue = None
        self._queues.clear()
        self._queued_ids.clear()
