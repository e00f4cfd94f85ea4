"""The outbox on Redis: replies are sent by the node that holds their chat's partition.

A message is stored once (`out:msg`, immutable json) with a small mutable state beside it
(`out:state`: attempts, next try, in flight, last error) and its id in its partition's ordered
set, so a new holder of the partition finds the replies a dead node had queued and sends them in
the order they were queued. `answered:<inbound key>` (with the seen-id TTL) tells any node that a
reply to an inbound message was already queued, so a message run again after a takeover is not
answered twice.

`store` writes a batch of the outbox writer's line (bus/writer.py) as one pipeline: each
reply's put, and each completion of an inbound message (RedisInbound's script), in the
writer's order (script_calls.py says why as `EVAL`): one round trip for every chat's replies
and completions waiting meanwhile, instead of one each.

A node keeps the entries it stored itself, and their state as it changes them, while it holds
their partition under the same lease token: nobody else sends or changes them meanwhile, so
the dispatcher's `get()` before each send reads nothing, and marking a send in flight writes
the known state instead of reading it first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from soulflow.backends.base import (
    SEEN_WINDOW_S,
    Completing,
    Completion,
    OutboxWrite,
    WriteResult,
)
from soulflow.backends.redis import scripts
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.inbound import RedisInbound
from soulflow.backends.redis.keys import Keys, Part, partition_of
from soulflow.backends.redis.partitions import PartitionLeases
from soulflow.backends.redis.script_calls import CallBatcher, ScriptCall, run_in_order
from soulflow.contracts import OutboundMessage, OutboxEntry
from soulflow.errors import StoreError

log = logging.getLogger(__name__)


def _state(attempts: int, next_at: float, in_flight: bool, error: str) -> str:
    return f"{attempts}|{next_at!r}|{int(in_flight)}|{error[:500]}"


def _entry(message_json: bytes | str, state: bytes | str | None) -> OutboxEntry:
    entry = OutboxEntry(OutboundMessage.from_dict(json.loads(message_json)))
    if state:
        text = state.decode() if isinstance(state, bytes) else state
        attempts, next_at, in_flight, error = text.split("|", 3)
        entry.attempts, entry.next_at = int(attempts), float(next_at)
        entry.in_flight, entry.last_error = in_flight == "1", error
    return entry


# KEYS: messages hash, state hash. ARGV: message id. Marks the entry in flight, keeping its
# attempts, next try and last error (one step, no read-modify-write by the node); 0 if gone.
_MARK_SENDING = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local state = redis.call('HGET', KEYS[2], ARGV[1]) or '0|0|0|'
local attempts, next_at, err = string.match(state, '^([^|]*)|([^|]*)|[^|]*|(.*)$')
if not attempts then attempts, next_at, err = '0', '0', '' end
redis.call('HSET', KEYS[2], ARGV[1], attempts .. '|' .. next_at .. '|1|' .. err)
return 1
"""

@dataclass(frozen=True, slots=True)
class _Put:
    """A reply of a batch: its script call (None: refused before any), and whether an
    earlier try of it failed with its outcome unknown."""

    message: OutboundMessage
    unsure: bool
    call: ScriptCall | None


# a completion of a batch: per key, its script call, or how it ended without one
_Completions = list[tuple[str, ScriptCall | Completion]]

PARTS_KNOWN = 4096  # message ids whose partition a node remembers (then it starts over)


def _calls(planned: _Put | _Completions) -> list[ScriptCall]:
    if isinstance(planned, _Put):
        return [planned.call] if planned.call is not None else []
    return [step for _, step in planned if isinstance(step, ScriptCall)]


class RedisOutbox:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, partitions: PartitionLeases, *,
                 answered_ttl_s: float = SEEN_WINDOW_S,
                 inbound: RedisInbound | None = None) -> None:
        self._client = client
        self._inbound = inbound  # its completions ride in `store`'s batches
        self._keys = keys
        self._partitions = partitions
        self._answered_ttl = max(1, int(answered_ttl_s))
        # the send marks of every chat's worker, sent together (script_calls.py)
        self._marks = CallBatcher(client, "outbox:marks")
        self._sending: dict[str, Part] = {}  # message id → partition, while a send runs here
        # message id → partition of the messages this node stored or read: a stored message
        # never changes, so neither does its chat; saves reading it again to send it
        self._parts: dict[str, Part] = {}
        # message ids whose last `put` failed: Redis may have stored the message and died (or
        # the connection broke) before answering; the next try then finds it stored
        self._unsure: set[str] = set()
        # message id → (lease token, entry) of the messages this node stored (module doc)
        self._own: dict[str, tuple[int, OutboxEntry]] = {}

    def _keep(self, entry: OutboxEntry) -> None:
        message_id = entry.message.message_id
        part = self._parts.get(message_id)
        lease = self._partitions.lease(part) if part is not None else None
        if lease is None or len(self._own) >= PARTS_KNOWN:
            self._own.pop(message_id, None)
            return
        self._own[message_id] = (lease.token, entry)

    def _known(self, message_id: str) -> OutboxEntry | None:
        """This node's own entry, while its partition is still held under the same lease."""
        own = self._own.get(message_id)
        part = self._parts.get(message_id)
        if own is None or part is None:
            return None
        lease = self._partitions.lease(part)
        if lease is None or lease.token != own[0]:
            del self._own[message_id]
            return None
        return own[1]

    def busy(self, part: int) -> bool:
        """A send of this partition is under way here (its partition must not move now)."""
        return part in self._sending.values()

    def _part(self, message: OutboundMessage) -> Part:
        """The message's partition, remembered for its later `record_sending` / `_drop`."""
        part = partition_of(message.chat_key, self._keys.partitions)
        if len(self._parts) >= PARTS_KNOWN:
            self._parts.clear()
        self._parts[message.message_id] = part
        return part

    async def put(self, message: OutboundMessage) -> bool:
        """Store a message. An answer to an inbound message is stored only under the chat's
        current partition lease, held by this node (checked in the same script): a node that
        lost the chat while its turn ran must not queue the answer, or the chat's new holder,
        which runs that message again, could send a later answer first.

        A message stored by an earlier try whose answer was lost (Redis died, or the
        connection broke, after running the script) counts as stored by this try: the caller
        queues only what it stored, and nothing else would queue it while this node keeps
        the chat."""
        [stored] = await self.store([message])
        return bool(stored)

    async def store(self, writes: list[OutboxWrite]) -> list[WriteResult]:
        """The replies (as `put`) and completions (the inbound store's script) of `writes`
        as one pipeline, in order (script_calls.py)."""
        plan: list[_Put | _Completions] = []
        # ids whose last try failed before this batch (the batch marks its own as it goes)
        unsure = {w.message_id for w in writes
                  if isinstance(w, OutboundMessage) and w.message_id in self._unsure}
        for write in writes:
            if isinstance(write, Completing):
                inbound = self._inbound_store()
                plan.append([(key, await inbound.completion_call(key)) for key in write.keys])
            else:
                plan.append(self._plan_put(write, write.message_id in unsure))
                unsure.discard(write.message_id)  # a second put of it here is a repeat
        calls = [call for planned in plan for call in _calls(planned)]
        replies = iter(await run_in_order(self._client, calls))  # one per call, in order
        results: list[WriteResult] = []
        for planned in plan:
            if isinstance(planned, _Put):
                results.append(self._stored(planned, next(replies) if planned.call else None))
            else:
                results.append([step if isinstance(step, Completion)
                                else self._inbound_store().completed(key, next(replies))
                                for key, step in planned])
        return results

    def _inbound_store(self) -> RedisInbound:
        if self._inbound is None:
            raise StoreError("this outbox was opened without its inbound store")
        return self._inbound

    def _plan_put(self, message: OutboundMessage, unsure: bool) -> _Put:
        k = self._keys
        part = self._part(message)
        self._unsure.discard(message.message_id)
        fence_key, fence_value = k.outbox_sequence, ""
        if message.inbound_key:
            lease = self._partitions.lease(part)
            if lease is None:
                log.info("not storing the answer to %s: its chat moved to another node, which "
                         "answers it", message.inbound_key)
                return _Put(message, unsure, None)
            fence_key, fence_value = k.lease(k.partition_lease(part)), lease.value
        self._unsure.add(message.message_id)  # until Redis answers
        return _Put(message, unsure, ScriptCall(
            scripts.OUTBOX_PUT,
            [k.outbox_messages, k.outbox_state, k.outbox_order(part), k.outbox_sequence,
             k.answered(message.inbound_key or ""), fence_key],
            [message.message_id, json.dumps(message.to_dict()), self._answered_ttl,
             "1" if message.inbound_key else "0", fence_value]))

    def _stored(self, put: _Put, reply: Any) -> bool:
        """Whether a planned put stored its message (see `put`), from its script's reply."""
        message = put.message
        if put.call is None:
            return False
        self._unsure.discard(message.message_id)
        added = int(reply)
        if added == 1:
            self._keep(OutboxEntry(message))
        if added == 0 and put.unsure:
            return True  # stored by the try whose answer was lost
        if added < 0:
            log.info("not storing the answer to %s: its chat's partition is held under a newer "
                     "lease", message.inbound_key)
        return added == 1

    async def has_answered(self, inbound_key: str) -> bool:
        return bool(await self._client.exists(self._keys.answered(inbound_key)))

    async def _update(self, message_id: str, state: str) -> None:
        await self._mark(scripts.OUTBOX_STATE,
                         [self._keys.outbox_messages, self._keys.outbox_state],
                         [message_id, state])

    async def _mark(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """One send mark, in the batch of every chat's marks made meanwhile."""
        return await self._marks.call(ScriptCall(source, keys, args))

    async def record_sending(self, message_id: str) -> bool:
        part = self._parts.get(message_id)
        if part is None:
            entry = await self.get(message_id)
            if entry is None:
                return False
            part = self._part(entry.message)
        if self._partitions.lease(part) is None:
            return False  # moved to another node since pending() was read
        self._sending[message_id] = part  # busy from here: the partition stays until sent
        keys = [self._keys.outbox_messages, self._keys.outbox_state]
        known = self._known(message_id)
        if known is not None:  # its state is this node's: write it, nothing to read
            marked = await self._mark(scripts.OUTBOX_STATE, keys, [message_id, _state(
                known.attempts, known.next_at, True, known.last_error)])
        else:
            marked = await self._mark(_MARK_SENDING, keys, [message_id])
        if not marked:
            self._sending.pop(message_id, None)  # sent or buried meanwhile
            self._parts.pop(message_id, None)
            self._own.pop(message_id, None)
            return False
        if known is not None:
            known.in_flight = True
        return True

    async def record_attempt(self, message_id: str, attempts: int, next_at: float,
                             error: str) -> None:
        self._sending.pop(message_id, None)
        known = self._known(message_id)
        self._own.pop(message_id, None)  # kept again once Redis has the new state
        await self._update(message_id, _state(attempts, next_at, False, error))
        if known is not None:
            self._keep(replace(known, attempts=attempts, next_at=next_at, in_flight=False,
                               last_error=error[:500]))

    async def _drop(self, message_id: str) -> None:
        self._sending.pop(message_id, None)
        self._own.pop(message_id, None)
        part = self._parts.pop(message_id, None)  # known when it was stored or read here
        if part is None:
            raw = await self._client.hget(self._keys.outbox_messages, message_id)
            if raw is None:
                return
            chat_key = OutboundMessage.from_dict(json.loads(raw)).chat_key
            part = partition_of(chat_key, self._keys.partitions)
        await self._mark(scripts.OUTBOX_REMOVE,
                         [self._keys.outbox_messages, self._keys.outbox_state,
                          self._keys.outbox_order(part)], [message_id])

    async def mark_sent(self, message_id: str, platform_ids: list[str] | None = None) -> None:
        await self._drop(message_id)

    async def mark_dead(self, message_id: str) -> None:
        await self._drop(message_id)

    async def get(self, message_id: str) -> OutboxEntry | None:
        known = self._known(message_id)
        if known is not None:
            return replace(known)
        pipe = self._client.pipeline(transaction=False)  # one round trip for both halves
        pipe.hget(self._keys.outbox_messages, message_id)
        pipe.hget(self._keys.outbox_state, message_id)
        raw, state = await pipe.execute()
        return None if raw is None else _entry(raw, state)

    async def _entries(self, ids: Iterable[bytes | str]) -> list[OutboxEntry]:
        ids = list(ids)
        if not ids:
            return []
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(self._keys.outbox_messages, ids)
        pipe.hmget(self._keys.outbox_state, ids)
        raws, states = await pipe.execute()
        return [_entry(raw, state) for raw, state in zip(raws, states, strict=True)
                if raw is not None]

    async def pending(self) -> list[OutboxEntry]:
        """The entries of the partitions this node holds (its private one too), each
        partition in queue order."""
        entries: list[OutboxEntry] = []
        for part in self._partitions.worked():
            entries += await self._entries(
                await self._client.zrange(self._keys.outbox_order(part), 0, -1))
        return entries

    async def count(self) -> int:
        return int(await self._client.hlen(self._keys.outbox_messages))
