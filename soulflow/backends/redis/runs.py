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

**Read ahead.** The loops that scan runs (the watchdog, the dashboard, resuming, quiet turns)
call `find_open`, which reads the indexes and then every run found that is not current, all on
the asynchronous client; for `READ_AHEAD_S` after that, `state()` and `events()` of those runs
answer from what was read, so the scan that follows holds the event loop for nothing. A write
still checks the list's length in its script, so a state read ahead never makes one land on
top of another node's.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from redis.commands.core import AsyncScript

import soulflow.agent.run.events as ev
from soulflow.agent.run.reducer import RunState, apply_in_place
from soulflow.agent.run.timing import FinishedListener, report_finished
from soulflow.backends.base import RunMoved
from soulflow.backends.redis.chat_runs import ChatRuns, index_meta, matches
from soulflow.backends.redis.fencing import Fence, no_fence, partition_fence
from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.run_scripts import (
    APPEND_EVENTS,
    CLAIM_RUN,
    RUN_OF_INBOUND,
    RUNS_OF_CHAT,
)
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.backends.redis.writeback import Batch, WriteBehind

log = logging.getLogger(__name__)

__all__ = ["Fence", "RedisRunJournal", "no_fence", "partition_fence"]

FINISHED_TTL_S = 24 * 3600  # how long a finished run's events stay readable
CACHED_RUNS = 256  # runs whose events and state a node keeps (validated on every read)
READ_AHEAD_S = 0.5  # how long a run read ahead answers `state()` and `events()`

@dataclass(slots=True)
class _Run:
    """What this node knows of a run: the first `length` entries of its list (as Redis
    confirmed them) and the events queued after them (`queued`, their json lines), folded;
    the fencing token of this node's last append (0: none; see the module doc); `indexed`:
    Redis holds the run in the open-run indexes."""

    length: int
    events: list[ev.Event]
    state: RunState
    token: int = 0
    queued: list[str] = field(default_factory=list)
    indexed: bool = False
    read_until: float = 0.0  # a read ahead (`find_open`) answers the reads until then


def _decode(raw: bytes | str) -> ev.Event | None:
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return ev.Event.from_dict(record) if isinstance(record, dict) else None


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


@dataclass(slots=True)
class _StagedRuns:
    """The runs one batch writes: their lines go back to the front of the queue if the
    batch did not reach Redis."""

    journal: RedisRunJournal
    runs: list[tuple[str, _Run, list[str], bool]]  # id, run, lines, finished

    def written(self, results: list[Any]) -> None:
        for (run_id, run, lines, finished), result in zip(self.runs, results, strict=True):
            self.journal._written(run_id, run, lines, finished, result)

    def failed(self) -> None:
        for run_id, run, lines, _ in self.runs:
            run.queued[:0] = lines
            self.journal._unwritten[run_id] = run


class RedisRunJournal:
    """`RunJournal` on Redis (backends/base.py has the contract, backends/file/runs.py the file
    one). With a running `WriteBehind`, appends are queued and written in batches
    (writeback.py); `settle()` waits for them."""

    def __init__(self, state: StateRedis, *, redact: Callable[[Any], Any] | None = None,
                 on_finished: FinishedListener | None = None, fence: Fence = no_fence,
                 finished_ttl_s: int = FINISHED_TTL_S, cached_runs: int = CACHED_RUNS,
                 writer: WriteBehind | None = None) -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._redact = redact  # what reaches Redis is redacted; this node's cache is not
        self._on_finished = on_finished
        self._fence = fence
        self._ttl_s = finished_ttl_s
        self._cached_runs = cached_runs
        self._append = self._redis.register_script(APPEND_EVENTS)
        self._claim = self._redis.register_script(CLAIM_RUN)
        self._by_inbound = self._redis.register_script(RUN_OF_INBOUND)
        self._of_chat = self._redis.register_script(RUNS_OF_CHAT)
        self._by_inbound_async: AsyncScript | None = None
        self._of_chat_async: AsyncScript | None = None
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        # runs with events not yet confirmed by Redis (queued or in the batch in flight)
        self._unwritten: dict[str, _Run] = {}
        self._moved: OrderedDict[str, str] = OrderedDict()  # run id → why its write failed
        self._due: set[str] = set()  # runs somebody waits for (`settle`)
        self._chats = ChatRuns(fence, cached_runs)  # the open runs of the chats held here
        self._writer = writer
        if writer is not None:
            writer.register(self, {"run_append": APPEND_EVENTS})

    def _token(self, state: RunState) -> int:
        return (self._fence(state.chat.key) or 0) if state.chat.provider else 0

    def _new(self, run_id: str) -> _Run:
        """An empty entry for a run this node has not read yet; the least recently used one
        is forgotten past `cached_runs` (it is read again if needed), unless its events are
        still on their way to Redis."""
        run = self._runs[run_id] = _Run(0, [], RunState())
        excess = len(self._runs) - self._cached_runs
        if excess > 0:
            for old_id in [i for i in islice(self._runs, excess) if i not in self._unwritten]:
                del self._runs[old_id]
        return run

    def _current(self, run: _Run) -> bool:
        """Nobody else can have written to the run since this node's last append to it: the
        lease of that append's token is still held (module doc)."""
        return run.token > 0 and self._token(run.state) == run.token

    def _load(self, run_id: str) -> _Run:
        """The run brought up to date: only the entries after those already known are read,
        none while `_current` says nothing can have come. A run whose queued events lost
        their lease is read whole again (Redis refuses them)."""
        run = self._runs.get(run_id)
        if run is not None and (self._current(run) or time.monotonic() < run.read_until):
            self._runs.move_to_end(run_id)
            return run
        if self._read_whole(run_id, run):
            run = self._new(run_id)
        else:
            self._runs.move_to_end(run_id)
        self._extend(run, self._redis.lrange(self._keys.run(run_id), run.length, -1))
        return run

    def _read_whole(self, run_id: str, run: _Run | None) -> bool:
        """The run is read from its first entry: unknown here, or its queued events lost
        their lease (Redis refuses them)."""
        return run is None or bool(run.queued) or run_id in self._unwritten

    @staticmethod
    def _extend(run: _Run, raws: list[Any]) -> None:
        """Fold the entries read after the `run.length` known ones onto the run."""
        for raw in raws:
            event = _decode(raw)
            if event is not None:
                run.events.append(event)
                apply_in_place(run.state, event)
        run.length += len(raws)
        run.indexed = bool(run.length) and not run.state.finished

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

    def _moved_error(self, run_id: str) -> RunMoved:
        """The error for a run whose queued events Redis refused, told once: the driver stops
        on it; a later claim (this node holds the chat again) reads the run afresh."""
        return RunMoved(f"run {run_id} was taken over by the node that now holds "
                        f"{self._moved.pop(run_id, None) or 'its chat'}")

    def append(self, run_id: str, event: ev.Event) -> RunState:
        if run_id in self._moved:
            raise self._moved_error(run_id)
        record = {"run": run_id, **event.to_dict()}
        stored = self._redact(record) if self._redact is not None else record
        line = json.dumps(stored, ensure_ascii=False, separators=(",", ":"))
        run = self._cached(run_id, event)
        apply_in_place(run.state, event)
        run.events.append(event)
        run.queued.append(line)
        run.token = self._token(run.state)
        self._chats.note(run_id, run.state)
        if self._writer is not None and self._writer.running:
            self._unwritten[run_id] = run
            # stored at once: a run that ended (however: a cancel too), and a message the
            # platform just created for a streamed reply (its id must survive a kill)
            if run.state.finished or event.type == ev.REPLY_SHOWN:
                self._due.add(run_id)
                self._writer.hurry()
            else:
                self._writer.notify()
        else:
            run = self._write_through(run_id, run)
        state = run.state
        if self._on_finished is not None:
            report_finished(self._on_finished, self.events, run_id, event, state)
        return state

    def _script_call(self, run_id: str, run: _Run,
                     lines: list[str]) -> tuple[list[str], list[Any]]:
        state = run.state
        meta = index_meta(state)
        started = run.events[0].at if run.events else time.time()
        keys = [self._keys.run(run_id), self._keys.runs_open, self._keys.runs_meta,
                self._keys.runs_inbound, self._keys.runs_fence,
                self._keys.runs_of_chat(state.chat.key)]
        args = [run_id, run.token, json.dumps(meta, ensure_ascii=False),
                state.inbound_key or "", 1 if state.finished else 0, int(started * 1000),
                self._ttl_s, run.length, 1 if run.indexed else 0, *lines]
        return keys, args

    def _write_through(self, run_id: str, run: _Run) -> _Run:
        """Without the writer: the queued events now, on the synchronous client (if another
        writer appended meanwhile, its events are folded in and ours go after them)."""
        for _ in range(8):
            lines, run.queued = run.queued, []
            keys, args = self._script_call(run_id, run, lines)
            try:
                result = self._append(keys=keys, args=args)
            except BaseException:
                self._forget(run_id, run)
                raise
            if int(result) == -2:
                self._forget(run_id, run)
                pending = run.events[len(run.events) - len(lines):]
                run = self._load(run_id)
                for event in pending:
                    apply_in_place(run.state, event)
                    run.events.append(event)
                run.queued = lines
                run.token = self._token(run.state)
                continue
            self._written(run_id, run, lines, run.state.finished, result)
            if run_id in self._moved:
                raise self._moved_error(run_id)
            return run
        raise RuntimeError(f"run {run_id}: other writers kept appending; the event was not "
                           "written")

    def stage(self, batch: Batch, *, full: bool) -> _StagedRuns | None:
        """The writer's call: the queued events of every run (or of the runs due), one
        script call per run."""
        due, self._due = self._due, set()
        if not self._unwritten:
            return None
        staged = []
        for run_id, run in self._unwritten.items():
            if not run.queued or not (full or run_id in due):
                continue
            lines, run.queued = run.queued, []
            keys, args = self._script_call(run_id, run, lines)
            batch.script("run_append", keys, args)
            staged.append((run_id, run, lines, run.state.finished))
        return _StagedRuns(self, staged)

    def _written(self, run_id: str, run: _Run, lines: list[str], finished: bool,
                 result: Any) -> None:
        if not run.queued:
            self._unwritten.pop(run_id, None)
        length = result if isinstance(result, int) else -3
        if length < 0:
            why = {-1: run.state.chat.key, -2: "its chat (another writer appended)"}.get(
                length, f"its chat (the write failed: {result})")
            log.warning("run %s: %d queued events were refused; the run moved to %s",
                        run_id, len(lines), why)
            self._moved[run_id] = why
            while len(self._moved) > self._cached_runs:
                self._moved.popitem(last=False)
            self._forget(run_id, run)
            return
        run.length = length
        run.indexed = not finished

    def _forget(self, run_id: str, run: _Run) -> None:
        """Drop the cache entry (if it is still this one) and what this node believed of
        the run's chat: both are read again."""
        if self._runs.get(run_id) is run:
            del self._runs[run_id]
        if self._unwritten.get(run_id) is run:
            del self._unwritten[run_id]
        self._chats.drop(run.state.chat.key)

    async def settle(self, run_id: str | None = None) -> None:
        """Return once every event appended so far is in Redis; `RunMoved` if `run_id`'s
        were refused (another node holds its chat now)."""
        if self._writer is not None:
            self._due.update([run_id] if run_id is not None else self._unwritten)
            await self._writer.settle()
        if run_id is not None and run_id in self._moved:
            raise self._moved_error(run_id)

    def state(self, run_id: str) -> RunState:
        return self._load(run_id).state

    def events(self, run_id: str) -> list[ev.Event]:
        return list(self._load(run_id).events)

    def find(self, *, inbound_key: str | None = None, chat_key: str | None = None,
             statuses: frozenset[str] | None = None) -> list[str]:
        if inbound_key is not None:
            found = self._by_inbound(keys=[self._keys.runs_inbound, self._keys.runs_meta],
                                     args=[inbound_key])
            run_ids, metas = ([_text(found[0])], [found[1]]) if found else ([], [])
        elif chat_key is not None:  # the chat's own index: no scan of every open run
            known = self._chats.current(chat_key)
            if known is not None:  # nothing read while this node holds the chat
                return [run_id for run_id, meta in known.items()
                        if matches(meta, None, chat_key, statuses)]
            rows = self._of_chat(keys=[self._keys.runs_of_chat(chat_key), self._keys.runs_open,
                                       self._keys.runs_meta])
            rows = sorted(rows, key=lambda row: (float(row[1]), _text(row[0])))
            run_ids, metas = [_text(row[0]) for row in rows], [row[2] for row in rows]
            self._keep_chat(chat_key, list(zip(run_ids, metas, strict=True)))
        else:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrange(self._keys.runs_open, 0, -1)
            pipe.hgetall(self._keys.runs_meta)
            order, by_id = pipe.execute()
            run_ids = [_text(raw) for raw in order]
            metas = [by_id.get(raw) for raw in order]
        return self._matching(run_ids, metas, inbound_key, chat_key, statuses)

    async def preload(self, chat_key: str) -> None:
        """Read the chat's open runs ahead on the asynchronous client (unless this node
        knows them): the turn's `find(chat_key=...)`s and `find_inbound` then read nothing.
        Kept only if none of the chat's runs was appended to meanwhile."""
        token = self._fence(chat_key) or 0
        if not token or self._chats.current(chat_key) is not None or self._writer is None \
                or not self._writer.running:
            return
        if self._of_chat_async is None:
            self._of_chat_async = self._writer.client.register_script(RUNS_OF_CHAT)
        appended = self._chats.appended(chat_key)
        rows = await self._of_chat_async(keys=[self._keys.runs_of_chat(chat_key),
                                               self._keys.runs_open, self._keys.runs_meta])
        if self._chats.appended(chat_key) != appended or \
                (self._fence(chat_key) or 0) != token or \
                self._chats.current(chat_key) is not None:
            return
        rows = sorted(rows, key=lambda row: (float(row[1]), _text(row[0])))
        self._keep_chat(chat_key, [(_text(row[0]), row[2]) for row in rows])

    async def find_inbound(self, inbound_key: str, chat_key: str | None = None) -> list[str]:
        """`find(inbound_key=...)` for the start of a turn: from the chat's open runs while
        this node holds the chat, else on the asynchronous client while the writer runs
        (the event loop is not held), else as `find`."""
        known = self._chats.current(chat_key) if chat_key is not None else None
        if known is not None:
            return [run_id for run_id, meta in known.items()
                    if matches(meta, inbound_key, None, None)]
        if self._writer is None or not self._writer.running:
            return self.find(inbound_key=inbound_key)
        if self._by_inbound_async is None:
            self._by_inbound_async = self._writer.client.register_script(RUN_OF_INBOUND)
        found = await self._by_inbound_async(
            keys=[self._keys.runs_inbound, self._keys.runs_meta], args=[inbound_key])
        run_ids, metas = ([_text(found[0])], [found[1]]) if found else ([], [])
        matching = self._matching(run_ids, metas, inbound_key, None, None)
        await self.read_ahead(matching)
        return matching

    async def find_open(self, statuses: frozenset[str] | None = None, *,
                        chats: Callable[[str], bool] | None = None) -> list[str]:
        """`find(statuses=...)` of the runs whose chat `chats` accepts, on the asynchronous
        client while the writer runs: the indexes in one round trip, the runs found in one
        more (`read_ahead`), so their `state()` and `events()` read nothing."""
        if self._writer is None or not self._writer.running:
            return [run_id for run_id in self.find(statuses=statuses)
                    if chats is None or chats(self.state(run_id).chat.key)]
        async with self._writer.client.pipeline(transaction=False) as pipe:
            pipe.zrange(self._keys.runs_open, 0, -1)
            pipe.hgetall(self._keys.runs_meta)
            order, by_id = await pipe.execute()
        found = self._matching([_text(raw) for raw in order], [by_id.get(raw) for raw in order],
                               None, None, statuses, chats)
        await self.read_ahead(found)
        return found

    async def read_ahead(self, run_ids: list[str]) -> None:
        """Bring the cached runs up to date as `_load` would, for all of them in one round
        trip on the asynchronous client (`RunJournal.read_ahead`). A run this node appended
        to (or read) meanwhile is left as it is: what it knows then is newer, and a later
        read catches up."""
        if self._writer is None or not self._writer.running:
            return
        reads: list[tuple[str, _Run | None, int, int]] = []  # id, run, its length, read from
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is not None and self._current(run):
                continue
            length = run.length if run is not None else 0
            reads.append((run_id, run, length, 0 if self._read_whole(run_id, run) else length))
        if not reads:
            return
        async with self._writer.client.pipeline(transaction=False) as pipe:
            for run_id, _run, _length, start in reads:
                pipe.lrange(self._keys.run(run_id), start, -1)
            lists = await pipe.execute()
        for (run_id, before, length, start), raws in zip(reads, lists, strict=True):
            now = self._runs.get(run_id)
            if now is not before or run_id in self._unwritten or \
                    (now is not None and (now.queued or now.length != length)):
                continue  # changed meanwhile
            run = self._new(run_id) if before is None or start == 0 else before
            self._runs.move_to_end(run_id)
            self._extend(run, raws)
            run.read_until = time.monotonic() + READ_AHEAD_S

    def _keep_chat(self, chat_key: str, rows: list[tuple[str, Any]]) -> None:
        """Remember the chat's open runs as just read: Redis's, with this node's runs whose
        events are still on their way as this node knows them."""
        queued = [(run_id, run.state) for run_id, run in self._unwritten.items()
                  if run.state.chat.key == chat_key]
        self._chats.keep(chat_key, rows, queued)

    def _matching(self, run_ids: list[str], metas: list[Any], inbound_key: str | None,
                  chat_key: str | None, statuses: frozenset[str] | None,
                  chats: Callable[[str], bool] | None = None) -> list[str]:
        """The runs Redis listed that match (and whose chat `chats` accepts), as this node
        knows them: a run with events not in Redis yet is judged by its queued state instead
        (and listed last)."""
        def wanted(meta: dict[str, Any]) -> bool:
            return matches(meta, inbound_key, chat_key, statuses) and \
                (chats is None or chats(str(meta.get("chat"))))
        matching = []
        for run_id, raw_meta in zip(run_ids, metas, strict=True):
            if raw_meta is None or run_id in self._unwritten:
                continue  # finished meanwhile, or this node knows better (below)
            if wanted(json.loads(raw_meta)):
                matching.append(run_id)
        for run_id, run in list(self._unwritten.items()):
            if not run.state.finished and wanted(index_meta(run.state)):
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
        """Nothing to flush here: queued events go with the writer's next batch (`settle`),
        and Redis's own persistence (AOF) decides durability."""

    def close(self) -> None:
        """The client belongs to the runtime, which closes it once for every store."""

