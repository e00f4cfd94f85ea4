"""Conversation history on Redis: the same records as `runtime/sessions/<key>.jsonl`.

A session is a list of json messages (`session:<key>`); its metadata line, its byte count and
its last update live in three small shared structures, so `list_sessions()` is one sorted-set
read instead of a scan.

**The tail a turn reads.** A turn reads its session's last records three times (the user's
turn already recorded? the history; consolidation due?). Before it starts, `preload()` reads
the last `TAIL_RECORDS` asynchronously, and those reads are answered from that copy, which
this node's own appends extend. The copy is kept between turns while the node holds the
chat's partition under the same lease token (`fencing.py`): only the chat's holder writes
its session, so nothing can have come meanwhile, and the next turn of that chat reads
nothing at all. A session that is not a chat's (the heartbeat's), a read of more records
than the copy has, or a lease that changed is read from Redis on the spot, as before.

Appends are queued while the backend's writer runs (writeback.py): one batch pushes each
session's records at once, counts their bytes, notes the update and sets the metadata if it
is new (four commands a session, whatever the number of records). A read adds this node's
records still on their way, so the agent sees its own turn at once. Without the writer, an
append is one MULTI/EXEC of the same four commands.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow.backends.base import METADATA_TYPE, SessionInfo
from soulflow.backends.redis.fencing import Fence, no_fence
from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.backends.redis.writeback import Batch, WriteBehind


def _encode(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _decode(raw: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _size(records: list[_Record]) -> int:
    """The bytes the records add to the session (`sessions:bytes`), newlines counted as the
    file backend counts them."""
    return sum(len(r.line.encode("utf-8")) + 1 for r in records)


def _decode_all(raws: list[Any]) -> list[dict[str, Any]]:
    return [record for raw in raws if (record := _decode(raw)) is not None]


# KEYS: session list, metadata hash, bytes hash, updated set. ARGV: session key, metadata line,
# bytes, update time, the records. For records sent again after a batch whose answer was lost:
# if that batch landed, the list already ends with the last of them, and nothing is pushed.
_PUSH_ONCE = """
if redis.call('LINDEX', KEYS[1], -1) == ARGV[#ARGV] then return 0 end
redis.call('RPUSH', KEYS[1], unpack(ARGV, 5))
redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[3], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
return 1
"""

TAIL_RECORDS = 128  # what preload() reads: the history (20 + 9) and consolidation's check (61)
CACHED_TAILS = 256  # sessions whose tail a node keeps


@dataclass(slots=True)
class _Tail:
    """The last records of a session as this node knows them (its own appends included),
    read under the lease `token` of its chat; `complete`: they are the whole session."""

    chat_key: str
    token: int
    records: list[dict[str, Any]]
    complete: bool


@dataclass(frozen=True, slots=True)
class _Record:
    line: str
    at: float
    meta: str  # the session's metadata line, set if the session is new


@dataclass(slots=True)
class _StagedSessions:
    store: RedisSessionStore
    records: dict[str, list[_Record]]

    def written(self, results: list[Any]) -> None:
        for key, records in self.records.items():
            self.store._landed(key, records)

    def failed(self) -> None:
        for key, records in self.records.items():
            self.store._queued.setdefault(key, [])[:0] = records
            self.store._landed(key, records)
            self.store._resent.add(key)


class RedisSessionStore:
    """`SessionStore` on Redis (backends/base.py has the contract, backends/file/sessions.py the
    file one)."""

    def __init__(self, state: StateRedis, *, redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time,
                 writer: WriteBehind | None = None, fence: Fence = no_fence) -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._redact = redact
        self._clock = clock
        self._fence = fence
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._queued: dict[str, list[_Record]] = {}
        self._in_flight: dict[str, list[_Record]] = {}
        self._due: set[str] = set()  # sessions somebody waits for (`settle`)
        self._resent: set[str] = set()  # sessions whose records a failed batch carried
        self._writer = writer
        if writer is not None:
            writer.register(self, {"session_push_once": _PUSH_ONCE})

    def append(self, key: str, message: dict[str, Any]) -> None:
        record = {"at": self._clock(), **message}
        if self._redact is not None and isinstance(record.get("content"), str):
            record["content"] = self._redact(record["content"])  # a last net behind sealing
        meta = _encode({"_type": METADATA_TYPE, "key": key, "created_at": record["at"]})
        queued = _Record(_encode(record), float(record["at"]), meta)
        self._extend_tail(key, queued.line)
        if self._writer is not None and self._writer.running:
            self._queued.setdefault(key, []).append(queued)
            self._writer.notify()
            return
        pipe = self._redis.pipeline(transaction=True)
        self._push(pipe, key, [queued])
        pipe.execute()

    async def settle(self, key: str | None = None) -> None:
        """Return once the records appended so far (to `key`, or to every session) are in
        Redis (writeback.py)."""
        if self._writer is not None:
            self._due.update([key] if key is not None else self._queued)
            await self._writer.settle()

    async def preload(self, key: str, chat_key: str) -> None:
        """Read the session's tail for the turn about to start, without holding the event
        loop; nothing to read while this node's copy is current (module docstring)."""
        token = self._fence(chat_key) or 0
        tail = self._tails.get(key)
        if tail is not None and tail.token == token and token:
            self._tails.move_to_end(key)
            return
        self._tails.pop(key, None)
        if not token or self._writer is None or not self._writer.running \
                or self._unwritten_lines(key):
            return
        raws = await self._writer.client.lrange(self._keys.session(key), -TAIL_RECORDS, -1)
        if self._unwritten_lines(key) or (self._fence(chat_key) or 0) != token:
            return  # appended meanwhile, or the lease moved: read on the spot instead
        self._tails[key] = _Tail(chat_key, token, _decode_all(raws), len(raws) < TAIL_RECORDS)
        while len(self._tails) > CACHED_TAILS:
            self._tails.popitem(last=False)

    def _current_tail(self, key: str) -> _Tail | None:
        tail = self._tails.get(key)
        if tail is None:
            return None
        if tail.token and (self._fence(tail.chat_key) or 0) == tail.token:
            return tail
        del self._tails[key]
        return None

    def _extend_tail(self, key: str, line: str) -> None:
        tail = self._current_tail(key)
        if tail is None:
            return
        tail.records.append(json.loads(line))  # as a read would return it
        if len(tail.records) > TAIL_RECORDS:
            del tail.records[:len(tail.records) - TAIL_RECORDS]
            tail.complete = False

    def _push(self, pipe: Any, key: str, records: list[_Record]) -> None:
        """The four commands of one session's records (a pipeline or a `Batch`: both take
        `execute_command`)."""
        session, meta, size, updated = self._push_keys(key)
        pipe.execute_command("RPUSH", session, *(r.line for r in records))
        tail = self._current_tail(key)
        if tail is None or len(tail.records) <= len(records):  # maybe new: its metadata
            pipe.execute_command("HSETNX", meta, key, records[0].meta)
        pipe.execute_command("HINCRBY", size, key, _size(records))
        pipe.execute_command("ZADD", updated, records[-1].at, key)

    def _push_keys(self, key: str) -> list[str]:
        return [self._keys.session(key), self._keys.sessions_meta, self._keys.sessions_bytes,
                self._keys.sessions_updated]

    def stage(self, batch: Batch, *, full: bool) -> _StagedSessions | None:
        """The writer's call: every session's queued records (or those of the sessions
        due)."""
        due, self._due = self._due, set()
        if full:
            records, self._queued = self._queued, {}
        else:
            records = {key: self._queued.pop(key) for key in due if key in self._queued}
        if not records:
            return None
        for key, queued in records.items():
            if key in self._resent:  # the failed batch may have landed: push them once
                self._resent.discard(key)
                batch.script("session_push_once", self._push_keys(key), [
                    key, queued[0].meta, _size(queued), queued[-1].at,
                    *(r.line for r in queued)])
            else:
                self._push(batch, key, queued)
            self._in_flight.setdefault(key, []).extend(queued)
        return _StagedSessions(self, records)

    def _landed(self, key: str, records: list[_Record]) -> None:
        """`records` left the batch in flight (written, or queued again)."""
        flying = self._in_flight.get(key, [])
        del flying[:len(records)]
        if not flying:
            self._in_flight.pop(key, None)

    def _unwritten_lines(self, key: str) -> list[str]:
        """This node's records of `key` not in Redis yet, oldest first."""
        return [r.line for r in self._in_flight.get(key, []) + self._queued.get(key, [])]

    def _unwritten(self, key: str) -> list[dict[str, Any]]:
        return _decode_all(self._unwritten_lines(key))

    def last(self, key: str, count: int) -> list[dict[str, Any]]:
        if count <= 0:
            return []
        tail = self._current_tail(key)
        if tail is not None and (tail.complete or len(tail.records) >= count):
            return tail.records[-count:]
        unwritten = self._unwritten(key)
        if len(unwritten) >= count:
            return unwritten[-count:]
        stored = _decode_all(self._redis.lrange(self._keys.session(key),
                                                -(count - len(unwritten)), -1))
        return stored + unwritten

    def range(self, key: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
        if end is not None and end <= start:
            return []
        unwritten = self._unwritten(key)
        if not unwritten:
            stop = -1 if end is None else end - 1
            return _decode_all(self._redis.lrange(self._keys.session(key), start, stop))
        every = _decode_all(self._redis.lrange(self._keys.session(key), 0, -1)) + unwritten
        return every[start:end]

    def metadata(self, key: str) -> dict[str, Any] | None:
        raw = self._redis.hget(self._keys.sessions_meta, key)
        return _decode(raw) if raw is not None else None

    def list_sessions(self, limit: int | None = None) -> list[SessionInfo]:
        """The newest first; with `limit`, only those are read (the dashboard shows 20 of
        what may be thousands of sessions)."""
        updated = self._redis.zrevrange(self._keys.sessions_updated, 0,
                                        -1 if limit is None else max(0, limit) - 1,
                                        withscores=True)
        if not updated or limit == 0:
            return []
        sizes = self._redis.hmget(self._keys.sessions_bytes, [key for key, _ in updated])
        infos = []
        for (raw_key, score), size in zip(updated, sizes, strict=True):
            key = raw_key.decode("utf-8") if isinstance(raw_key, bytes) else str(raw_key)
            infos.append(SessionInfo(key, None, int(size or 0), float(score)))
        return infos

    def sync(self) -> None:
        """Nothing to flush: Redis's own persistence (AOF) decides durability."""

    def close(self) -> None:
        """The client belongs to the runtime, which closes it once for every store."""

