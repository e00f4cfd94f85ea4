"""The inbound journal on Redis: one stream per partition of chats, one consumer group.

`accept` is one Lua script: `SET seen:<key> NX EX ttl` (the dedupe, with Redis's own expiry),
`XADD` to the chat's partition stream, and a record in the `in:pending` hash (what is unfinished,
for `pending()` and for finding the entry to acknowledge). Only the node holding a partition's
lease reads its stream (`XREADGROUP … >`); when it acquires a partition it first takes over the
entries a previous holder read and never acknowledged (`XAUTOCLAIM`, min idle 0: the expired lease
already proves the old holder is gone). `complete` acknowledges and deletes the entry, fenced by
the lease the message was claimed under, in Redis and by this node's own deadline for it (as the
answer's storing is, outbox.py: an answer refused must leave its message to the next holder).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow.backends.base import SEEN_WINDOW_S, Completion
from soulflow.backends.redis import scripts
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import GROUP, Keys, Part, partition_of
from soulflow.backends.redis.partitions import PartitionLeases
from soulflow.backends.redis.script_calls import CallBatcher, ScriptCall, run_in_order
from soulflow.contracts import InboundMessage
from soulflow.errors import StoreError

FRESH_KNOWN = 100_000  # first deliveries remembered (then forgotten, and checked instead)


@dataclass(frozen=True, slots=True)
class _Claimed:
    part: Part
    entry_id: str
    lease_value: str


class RedisInbound:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, partitions: PartitionLeases, *,
                 seen_ttl_s: float = SEEN_WINDOW_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._keys = keys
        self._partitions = partitions
        self._seen_ttl = max(1, int(seen_ttl_s))
        self._clock = clock
        # the accepts of a batch's chats, screened side by side, sent together
        self._accepts = CallBatcher(client, "inbound:accepts")
        self._claimed: dict[str, _Claimed] = {}
        self._backlog: dict[Part, deque[tuple[str, InboundMessage]]] = {}
        self._swept_at: dict[Part, float] = {}  # monotonic time of each partition's last sweep
        # partitions whose last read failed: Redis may have handed this node entries whose
        # reply never arrived (a BLOCK that outlived the socket timeout, a cut connection)
        self._unsure: set[Part] = set()
        self._reading: set[Part] = set()  # partitions whose stream a read waits on now
        # read with `XREADGROUP >`: never handed to any consumer before (`first_delivery`)
        self._fresh: set[str] = set()

    def busy(self, part: int) -> bool:
        """Work of this partition in this node's hands (claimed, or read and queued)."""
        return bool(self._backlog.get(part)) or any(
            c.part == part for c in self._claimed.values())

    def reading(self, part: Part) -> bool:
        """A read of the partition's stream is under way: Redis may still hand it the next
        message, so the partition is not released until it returns."""
        return part in self._reading

    async def ensure_groups(self) -> None:
        """Create every shared partition's stream and consumer group, and this node's private
        one's (idempotent)."""
        parts: list[Part] = [*range(self._keys.partitions), self._partitions.private]
        for part in parts:
            try:
                await self._client.xgroup_create(self._keys.stream(part), GROUP, id="0",
                                                 mkstream=True)
            except StoreError as exc:  # Redis said no: fine if the group exists already
                if "BUSYGROUP" not in str(exc):
                    raise

    async def accept(self, message: InboundMessage) -> bool:
        part = partition_of(message.chat_key, self._keys.partitions)
        entry = await self._accepts.call(ScriptCall(
            scripts.INBOUND_ACCEPT,
            [self._keys.seen(message.key), self._keys.stream(part), self._keys.inbound_pending],
            [message.key, repr(self._clock()), json.dumps(message.to_dict()), self._seen_ttl,
             part]))
        return entry is not None

    async def is_seen(self, key: str) -> bool:
        return bool(await self._client.exists(self._keys.seen(key)))

    async def mark_seen(self, keys: list[str]) -> None:
        if not keys:
            return
        now = repr(self._clock())
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.set(self._keys.seen(key), now, nx=True, ex=self._seen_ttl)
            await pipe.execute()

    def first_delivery(self, key: str) -> bool:
        """The message came from this node's read of its stream (`>`), not from a takeover,
        a sweep or a release: no turn anywhere can have answered it yet."""
        return key in self._fresh and key in self._claimed

    async def complete(self, key: str, status: str, error: str | None = None) -> Completion:
        call = await self.completion_call(key)
        if isinstance(call, Completion):
            return call
        [reply] = await run_in_order(self._client, [call])
        return self.completed(key, reply)

    async def completion_call(self, key: str) -> ScriptCall | Completion:
        """The script call that completes `key`, for a batch (`RedisOutbox.store`); or how
        the completion ended already, without one. The message stays in this node's hands,
        under the lease it was claimed with, until its call has run (`completed`): a call
        that never reached Redis is tried again under that same lease, never without one."""
        claimed = self._claimed.get(key)
        if claimed is None:  # never handed to us: e.g. refused at intake, before any work
            raw = await self._client.hget(self._keys.inbound_pending, key)
            if raw is None:
                self._fresh.discard(key)
                return Completion.UNKNOWN
            part_text, entry_id, _ = _text(raw).split("|", 2)
            claimed = _Claimed(_part(part_text), entry_id, "")
        elif claimed.lease_value and self._partitions.lease(claimed.part) is None:
            # lapsed by this node's own deadline, if not yet in Redis: `RedisOutbox.put`
            # refuses the answer from then on, so the message must stay for the next holder
            self._forget(key)
            return Completion.FENCED
        lease_key = (self._keys.lease(self._keys.partition_lease(claimed.part))
                     if claimed.lease_value else self._keys.inbound_pending)
        return ScriptCall(scripts.INBOUND_COMPLETE,
                          [self._keys.inbound_pending, self._keys.stream(claimed.part),
                           lease_key],
                          [key, claimed.entry_id, claimed.lease_value, GROUP])

    def completed(self, key: str, reply: Any) -> Completion:
        """How the completion of `key` ended, from its script's reply; the message is out of
        this node's hands from here."""
        self._forget(key)
        return {1: Completion.DONE, 0: Completion.UNKNOWN}.get(int(reply), Completion.FENCED)

    def _forget(self, key: str) -> None:
        self._fresh.discard(key)
        self._claimed.pop(key, None)

    async def claim(self, limit: int = 100, *, wait_s: float = 0.0) -> list[InboundMessage]:
        try:
            return await self._claim(limit, wait_s)
        except StoreError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_groups()  # Redis came back empty (no persistence)
            return []

    async def _claim(self, limit: int, wait_s: float) -> list[InboundMessage]:
        node = self._partitions.node_id
        for part in self._partitions.fresh():
            self._backlog[part] = deque(await self._reclaim(part, node, min_idle_ms=0))
            self._partitions.reclaimed(part)
            self._swept_at[part] = time.monotonic()
        await self._recover_unsure(node)
        await self._sweep(node)
        out: list[InboundMessage] = []
        readable: list[Part] = []
        # taken over during the awaits above: the next claim reclaims its old holder's
        # entries first; reading its stream now would hand out newer messages before them
        unclaimed = set(self._partitions.fresh())
        for part in self._partitions.worked():
            if part in unclaimed:
                continue
            backlog = self._backlog.get(part)
            while backlog and len(out) < limit:
                entry_id, message = backlog.popleft()
                self._hand(part, entry_id, message, out)
            if not backlog and not self._partitions.leaving(part):
                readable.append(part)
        for part in list(self._backlog):
            if not self._backlog[part] or self._partitions.lease(part) is None:
                del self._backlog[part]  # drained, or lost: a new holder reclaims it
        if not readable and not out and wait_s > 0:
            await asyncio.sleep(wait_s)  # no partition to read yet: the caller retries after
            return out
        if readable and len(out) < limit:
            streams = {self._keys.stream(p): ">" for p in readable}
            block = int(wait_s * 1000) if wait_s > 0 and not out else None
            self._reading.update(readable)
            try:
                replies = await self._client.xreadgroup(GROUP, node, streams,
                                                        count=limit - len(out), block=block)
            except (StoreError, OSError, TimeoutError):
                self._unsure.update(readable)
                raise
            finally:
                self._reading.difference_update(readable)
            by_stream = {self._keys.stream(p): p for p in readable}
            for stream, entries in replies or []:
                part = by_stream[_text(stream)]
                for entry_id, fields in entries:
                    message = _decode(fields)
                    if message is None:  # not ours to run: acknowledge so it never returns
                        await self._client.xack(stream, GROUP, entry_id)
                        continue
                    if len(self._fresh) >= FRESH_KNOWN:
                        self._fresh.clear()  # forgetting only costs an answered check each
                    self._fresh.add(message.key)
                    if len(out) < limit:
                        self._hand(part, _text(entry_id), message, out)
                    else:  # COUNT is per stream: the surplus is ours now, next in line
                        self._backlog.setdefault(part, deque()).append(
                            (_text(entry_id), message))
        return out

    async def release(self, messages: list[InboundMessage]) -> None:
        """Back into the line in stream order (entry ids), before what was read after them,
        whatever order the caller gives them in."""
        touched: set[Part] = set()
        for message in messages:
            self._fresh.discard(message.key)  # a turn may have answered it before giving back
            claimed = self._claimed.pop(message.key, None)
            if claimed is not None and self._partitions.lease(claimed.part) is not None:
                self._backlog.setdefault(claimed.part, deque()).append(
                    (claimed.entry_id, message))
                touched.add(claimed.part)
            # else: the partition moved; its new holder (maybe this node again, after a
            # takeover reclaim) hands the entry out again
        for part in touched:
            self._backlog[part] = deque(sorted(self._backlog[part],
                                               key=lambda item: _entry_order(item[0])))

    def _hand(self, part: Part, entry_id: str, message: InboundMessage,
              out: list[InboundMessage]) -> None:
        lease = self._partitions.lease(part)
        if lease is None or message.key in self._claimed:
            return
        self._claimed[message.key] = _Claimed(part, entry_id, lease.value)
        out.append(message)

    async def _recover_unsure(self, node: str) -> None:
        """After a failed read, first take back what Redis may have handed over unseen:
        those entries are older than anything read later, so they go before them, in order
        (left alone, the sweep or the next holder would answer them after later messages of
        their chat)."""
        for part in sorted(self._unsure, key=str):
            if self._partitions.lease(part) is not None:
                queued = self._backlog.get(part, deque())
                known = {m.key for _, m in queued}
                found = [(entry_id, m) for entry_id, m in
                         await self._reclaim(part, node, min_idle_ms=0) if m.key not in known]
                if found or queued:
                    self._backlog[part] = deque([*found, *queued])
            self._unsure.discard(part)

    async def _sweep(self, node: str) -> None:
        """Once a TTL per held partition: take entries idle for a TTL in any consumer's hands.
        Only a read that reached Redis after its sender's lease had passed (a network delay
        over a third of a TTL) leaves such an orphan; without the sweep it would wait for the
        partition's next move."""
        ttl = self._partitions.ttl_s
        now = time.monotonic()
        for part in self._partitions.worked():
            if now - self._swept_at.setdefault(part, now) < ttl:
                continue
            self._swept_at[part] = now
            queued = {m.key for _, m in self._backlog.get(part, ())}
            orphans = [(entry_id, m) for entry_id, m in
                       await self._reclaim(part, node, min_idle_ms=int(ttl * 1000))
                       if m.key not in queued]
            if orphans:
                self._backlog.setdefault(part, deque()).extend(orphans)

    async def _reclaim(self, part: Part, node: str, *,
                       min_idle_ms: int) -> list[tuple[str, InboundMessage]]:
        """Every entry of the partition read but not acknowledged for `min_idle_ms` (by any
        consumer: a dead holder, or this node in an earlier life), now ours, oldest first."""
        stream, start = self._keys.stream(part), "0-0"
        lease = self._partitions.lease(part)
        found: list[tuple[str, InboundMessage]] = []
        while True:
            reply = await self._client.xautoclaim(stream, GROUP, node,
                                                  min_idle_time=min_idle_ms,
                                                  start_id=start, count=100)
            start = _text(reply[0])
            for entry_id, fields in reply[1]:
                message = _decode(fields) if fields else None
                if message is None:
                    continue
                self._fresh.discard(message.key)
                in_hand = self._claimed.get(message.key)
                if in_hand is None:
                    found.append((_text(entry_id), message))
                elif lease is not None:  # still running here from before: now under this lease
                    self._claimed[message.key] = _Claimed(part, in_hand.entry_id, lease.value)
            if start == "0-0":
                break
        found.sort(key=lambda item: _entry_order(item[0]))
        return found

    async def pending(self) -> list[InboundMessage]:
        messages = []
        for raw in (await self._client.hgetall(self._keys.inbound_pending)).values():
            _, _, body = _text(raw).split("|", 2)
            messages.append(InboundMessage.from_dict(json.loads(body)))
        return sorted(messages, key=lambda m: m.received_at)

    async def pending_count(self) -> int:
        return int(await self._client.hlen(self._keys.inbound_pending))


def _decode(fields: dict[bytes, bytes]) -> InboundMessage | None:
    body = fields.get(b"m")
    if body is None:
        return None
    try:
        return InboundMessage.from_dict(json.loads(body))
    except (TypeError, ValueError):
        return None


def _part(text: str) -> Part:
    """A partition as recorded in `in:pending`: a number, or a private `node:<id>`."""
    return int(text) if text.isdigit() else text


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
