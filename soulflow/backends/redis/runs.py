"""Agent run journals on Redis: a run resumes on whichever node holds its chat.

A run is its events (soulflow/agent/run/events.py), one json per entry in the list `run:<id>`,
redacted as the file journal is. Unfinished runs are indexed for `find()`: `runs:open` (start
order), `runs:meta` (status, chat, inbound key), `runs:inbound` (inbound key → run) and
`runs:chat:<chat>` (a chat's runs). Every append is one Lua script that pushes the event and
updates the indexes together; the event that finishes a run drops it from the indexes and
gives its list a TTL (kept 24 hours, for the dashboard and debugging; the file backend
archives finished runs on disk instead). A day, not a week: Redis keeps them in RAM, about
1.5 KB a run, so a week at 20 messages a second held some 18 GB.

**One driver per run.** Chats are partitioned over the nodes (docs/scaling.md); a run is
driven by the node that holds its chat's partition. Each write carries the fencing token of
that partition's lease (`fence(chat_key)`, 0 when this node does not hold it), and the script
refuses a write under a token older than the newest one the run has seen (`runs:fence`). So a
node that takes a partition over and `claim()`s a dead node's run locks out any late write by
the old holder, which gets `RunMoved` and stops. The interrupted-tool rules of `AgentLoop` are
the same as after a restart: the journal says which call was started and not finished.

**Cache.** Events are append-only and run ids unique, so each node keeps a run's events and
folded state and validates them on every read by fetching only the entries after the ones it
has (`LRANGE run from n`): one round trip, never a stale state, whoever wrote last. An append
is folded onto the cached state and written only if the list still has the length that state
was folded from (checked in the script; else the run is read again and the append retried),
so a step of the loop costs one round trip.

A read needs no round trip at all while this node still holds the lease it last appended
under: that append left the run's fence at its token, so an older holder's write is refused
and a newer holder needs the lease this node still holds; nobody else can have written since.
The cache is read through again as soon as the chat's fencing token differs (lease lost or
taken anew) and without leases (tests, one node). The run this node finished is read from the
cache too while the lease holds: its fence is dropped with the indexes, but nothing appends
after DONE (`AgentLoop` stops there), and the state and events that follow the finishing
append (the finished listener, the turn's end) are those that append just wrote.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import soulflow.agent.run.events as ev
from soulflow.agent.run.reducer import RunState, apply_in_place
from soulflow.agent.run.timing import FinishedListener, report_finished
from soulflow.backends.base import Lease, RunMoved
from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.sync_client import StateRedis

FINISHED_TTL_S = 24 * 3600  # how long a finished run's events stay readable
CACHED_RUNS = 256  # runs whose events and state a node keeps (validated on every read)

# KEYS: run list, runs:open, runs:meta, runs:inbound, runs:fence, runs:chat:<chat>
# ARGV: run id, event json, token, meta json, inbound key, finished (0/1), start ms, ttl s,
#       the list's length the event was folded onto. -1: fenced; -2: someone appended since
_APPEND = """
local token = tonumber(ARGV[3])
local held = tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '0')
if token < held then return -1 end
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[9]) then return -2 end
local n = redis.call('RPUSH', KEYS[1], ARGV[2])
if ARGV[6] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('SREM', KEYS[6], ARGV[1])
  if ARGV[5] ~= '' and redis.call('HGET', KEYS[4], ARGV[5]) == ARGV[1] then
    redis.call('HDEL', KEYS[4], ARGV[5])
  end
  redis.call('EXPIRE', KEYS[1], ARGV[8])
else
  if token > held then redis.call('HSET', KEYS[5], ARGV[1], token) end
  redis.call('ZADD', KEYS[2], 'NX', ARGV[7], ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
  redis.call('SADD', KEYS[6], ARGV[1])
  if ARGV[5] ~= '' then redis.call('HSET', KEYS[4], ARGV[5], ARGV[1]) end
end
return n
"""

# KEYS: runs:open, runs:fence; ARGV: run id, token. 1: ours (or finished), 0: a newer holder's
_CLAIM = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
local token = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if token < held then return 0 end
if token > held then redis.call('HSET', KEYS[2], ARGV[1], token) end
return 1
"""

# KEYS: runs:inbound, runs:meta; ARGV: inbound key → {run id, its meta json or false}, or nil
_BY_INBOUND = """
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return nil end
return {id, redis.call('HGET', KEYS[2], id)}
"""

# KEYS: runs:chat:<chat>, runs:open, runs:meta → {run id, start score, meta json} per run
_OF_CHAT = """
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local meta = redis.call('HGET', KEYS[3], id)
  if meta then
    table.insert(found, {id, redis.call('ZSCORE', KEYS[2], id) or '0', meta})
  end
end
return found
"""

Fence = Callable[[str], int | None]  # chat key → this node's partition lease token, or None


def no_fence(chat_key: str) -> int | None:
    """Before the backend is open (and in tests of one node): this node holds no lease."""
    return None


class ChatLeases(Protocol):
    """What `partition_fence` reads from a `RedisBackend` (declared here, so this module
    need not import the backend that imports it)."""

    def chat_lease(self, chat_key: str) -> Lease | None: ...


def partition_fence(backend: ChatLeases) -> Fence:
    """The fencing token of the partition lease under which this node holds a chat, while the
    lease is safe to act on (`PartitionLeases.lease`), else None."""
    def token(chat_key: str) -> int | None:
        lease = backend.chat_lease(chat_key)
        return lease.token if lease is not None else None
    return token


@dataclass(slots=True)
class _Run:
    """What this node knows of a run: its first `length` list entries, folded, and the
    fencing token of this node's last append to it (0: none; see the module doc)."""

    length: int
    events: list[ev.Event]
    state: RunState
    token: int = 0


def _decode(raw: bytes | str) -> ev.Event | None:
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return ev.Event.from_dict(record) if isinstance(record, dict) else None


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


class RedisRunJournal:
    """`RunJournal` on Redis (backends/base.py has the contract, backends/file/runs.py the file
    one)."""

    def __init__(self, state: StateRedis, *, redact: Callable[[Any], Any] | None = None,
                 on_finished: FinishedListener | None = None, fence: Fence = no_fence,
                 finished_ttl_s: int = FINISHED_TTL_S, cached_runs: int = CACHED_RUNS) -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._redact = redact  # what reaches Redis is redacted; this node's cache is not
        self._on_finished = on_finished
        self._fence = fence
        self._ttl_s = finished_ttl_s
        self._cached_runs = cached_runs
        self._append = self._redis.register_script(_APPEND)
        self._claim = self._redis.register_script(_CLAIM)
        self._by_inbound = self._redis.register_script(_BY_INBOUND)
        self._of_chat = self._redis.register_script(_OF_CHAT)
        self._runs: OrderedDict[str, _Run] = OrderedDict()

    def _token(self, state: RunState) -> int:
        return (self._fence(state.chat.key) or 0) if state.chat.provider else 0

    def _new(self, run_id: str) -> _Run:
        """An empty entry for a run this node has not read yet; the least recently used one
        is forgotten past `cached_runs` (it is read again if needed)."""
        run = self._runs[run_id] = _Run(0, [], RunState())
        while len(self._runs) > self._cached_runs:
            self._runs.popitem(last=False)
        return run

    def _current(self, run: _Run) -> bool:
        """Nobody else can have written to the run since this node's last append to it: the
        lease of that append's token is still held (module doc)."""
        return run.token > 0 and self._token(run.state) == run.token

    def _load(self, run_id: str) -> _Run:
        """The run brought up to date: only the entries after those already known are read,
        none while `_current` says nothing can have come."""
        run = self._runs.get(run_id)
        if run is None:
            run = self._new(run_id)
        else:
            self._runs.move_to_end(run_id)
            if self._current(run):
                return run
        raws = self._redis.lrange(self._keys.run(run_id), run.length, -1)
        for raw in raws:
            event = _decode(raw)
            if event is not None:
                run.events.append(event)
                apply_in_place(run.state, event)
        run.length += len(raws)
        return run

    def _cached(self, run_id: str, event: ev.Event) -> _Run:
        """The run as this node last saw it (its append checks that nothing came since);
        read only on first use, never for a run this append starts."""
        run = self._runs.get(run_id)
        if run is not None:
            self._runs.move_to_end(run_id)
            return run
        if event.type == ev.RUN_STARTED:
            return self._new(run_id)
        return self._load(run_id)

    def append(self, run_id: str, event: ev.Event) -> RunState:
        record = {"run": run_id, **event.to_dict()}
        stored = self._redact(record) if self._redact is not None else record
        line = json.dumps(stored, ensure_ascii=False, separators=(",", ":"))
        run = self._cached(run_id, event)
        for _ in range(8):
            state = run.state
            apply_in_place(state, event)  # on the cache; dropped below if the write fails
            meta = {"status": state.status, "chat": state.chat.key,
                    "inbound": state.inbound_key, "task": bool(state.chat.task_id),
                    "parent": state.parent_run}
            started = run.events[0].at if run.events else event.at
            token = self._token(state)
            try:
                length = int(self._append(
                    keys=[self._keys.run(run_id), self._keys.runs_open, self._keys.runs_meta,
                          self._keys.runs_inbound, self._keys.runs_fence,
                          self._keys.runs_of_chat(state.chat.key)],
                    args=[run_id, line, token, json.dumps(meta, ensure_ascii=False),
                          state.inbound_key or "", 1 if state.finished else 0,
                          int(started * 1000), self._ttl_s, run.length]))
            except BaseException:
                self._runs.pop(run_id, None)
                raise
            if length == -2:  # another node appended since: fold its events, then retry
                self._runs.pop(run_id, None)
                run = self._load(run_id)
                continue
            if length < 0:
                self._runs.pop(run_id, None)
                raise RunMoved(f"run {run_id} was taken over by the node that now holds "
                               f"{state.chat.key}")
            run.events.append(event)
            run.length = length
            run.token = token
            if self._on_finished is not None:
                report_finished(self._on_finished, self.events, run_id, event, state)
            return state
        raise RuntimeError(f"run {run_id}: other writers kept appending; the event was not "
                           "written")

    def state(self, run_id: str) -> RunState:
        return self._load(run_id).state

    def events(self, run_id: str) -> list[ev.Event]:
        return list(self._load(run_id).events)

    def find(self, *, inbound_key: str | None = None, chat_key: str | None = None,
             statuses: frozenset[str] | None = None) -> list[str]:
        if inbound_key is not None:
            found = self._by_inbound(keys=[self._keys.runs_inbound, self._keys.runs_meta],
                                     args=[inbound_key])
            if not found:
                return []
            run_ids, metas = [_text(found[0])], [found[1]]
        elif chat_key is not None:  # the chat's own index: no scan of every open run
            rows = self._of_chat(keys=[self._keys.runs_of_chat(chat_key), self._keys.runs_open,
                                       self._keys.runs_meta])
            rows = sorted(rows, key=lambda row: (float(row[1]), _text(row[0])))
            run_ids, metas = [_text(row[0]) for row in rows], [row[2] for row in rows]
        else:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrange(self._keys.runs_open, 0, -1)
            pipe.hgetall(self._keys.runs_meta)
            order, by_id = pipe.execute()
            run_ids = [_text(raw) for raw in order]
            metas = [by_id.get(raw) for raw in order]
        matching = []
        for run_id, raw_meta in zip(run_ids, metas, strict=True):
            if raw_meta is None:
                continue  # finished meanwhile
            meta = json.loads(raw_meta)
            if statuses is not None and meta.get("status") not in statuses:
                continue
            if inbound_key is not None and meta.get("inbound") != inbound_key:
                continue
            if chat_key is not None and meta.get("chat") != chat_key:
                continue
            matching.append(run_id)
        return matching

    def claim(self, run_id: str) -> bool:
        cached = self._runs.get(run_id)
        if cached is not None and self._current(cached):
            return True  # this node's last append fenced the run with the lease it still holds
        token = self._token(self._load(run_id).state)
        return bool(self._claim(keys=[self._keys.runs_open, self._keys.runs_fence],
                                args=[run_id, token]))

    @property
    def needs_compaction(self) -> bool:
        """Finished runs leave the indexes as they finish; their lists expire on their own."""
        return False

    def compact(self) -> None:
        """Nothing to rewrite (see `needs_compaction`)."""

    def sync(self) -> None:
        """Nothing to flush: Redis's own persistence (AOF) decides durability."""

    def close(self) -> None:
        """The client belongs to the runtime, which closes it once for every store."""
