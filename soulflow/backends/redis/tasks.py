"""The task store on Redis: one hash field per task, written only by the node holding its chat.

Several daemons share the tasks. A task belongs to its chat, and the chat's work runs on the
node holding the chat's partition lease (docs/scaling.md), so that node runs the task too. Every
write of a task (`add`, `checkpoint`, and through them `decide` and `set_status`) is one Lua
script that first compares the partition's lease key with the lease this node holds (the
fencing token is part of the value) and the stored revision with the one this node last read;
either mismatch writes nothing and raises `TaskFenced`. A runner checkpoints a step as
`running` before the step starts, so a step never starts on a node that no longer holds the
chat; the node that takes the chat over recovers the task from its last checkpoint by the rules
of a restart (docs/tasks.md).

One write comes without the lease: a person's answer or cancel given on another node's
dashboard (`record_answer`), accepted only while the stored task waits (no loop drives it
anywhere) and its revision is the one read there; the chat's node then runs it.

Live objects are cached only for tasks of chats held here, tagged with the lease and the
record's bytes they were read under; every read fetches the record and keeps the live object
only if both still match, so an answer written elsewhere is seen at once. Records that cannot
be parsed are reported in `problems` once and left untouched. Redis not answering raises
`StoreUnavailable` (the task code never imports redis).

Keys (`soulflow/backends/redis/keys.py`): `tasks:rec` (id → json), `tasks:idx` (id →
`revision|chat`), `tasks:open` (unfinished ids), `tasks:created` and `tasks:chat:<chat>` (ids by
creation time), `tasks:finished` (finished ids by update time: beyond `KEEP_FINISHED` the oldest
are removed, their stories kept 30 days), `tasks:details:<id>` (the story, capped).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import ParamSpec, Protocol, TypeVar

from soulflow.backends import base
from soulflow.backends.base import Lease, Offload, call_here
from soulflow.backends.redis.keys import Keys, TaskKeys
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.errors import StoreError, StoreUnavailable
from soulflow.tasks.model import (
    TaskFenced,
    TaskState,
    TaskStatus,
    check_task_id,
    detail_entry,
    now,
    task_chat_key,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

DETAIL_CAP = 2000  # lines kept per task story
DETAIL_TTL_S = 30 * 24 * 3600  # a pruned task's story stays this long
FINISHED = "1"

# chat key -> (lease key, lease value) while this node holds the chat's partition, else None
Fence = Callable[[str], tuple[str, str] | None]

# KEYS: records, index, open set, created zset, finished zset, chat zset, lease (or records).
# ARGV: id, json, expected revision ('new' for add), new revision, lease value ('' = unfenced),
# finished '1'/'0', created_at, updated_at, chat key, keep finished, key prefix, details ttl,
# answer '1' (unfenced, only onto a stored task that waits) / '0'.
# 1 written, -1 fenced, -2 revision conflict, -3 exists (add), -4 not waiting (answer).
CHECKPOINT = """
if ARGV[5] ~= '' and redis.call('GET', KEYS[7]) ~= ARGV[5] then return -1 end
if ARGV[13] == '1' then
  local current = redis.call('HGET', KEYS[1], ARGV[1])
  if not current or cjson.decode(current)['status'] ~= 'waiting_approval' then return -4 end
end
local idx = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[3] == 'new' then
  if idx then return -3 end
else
  local rev = 0
  if idx then rev = tonumber(string.match(idx, '^(%d+)|')) end
  if rev ~= tonumber(ARGV[3]) then return -2 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4] .. '|' .. ARGV[9])
redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[7], ARGV[1])
if ARGV[6] ~= '1' then
  redis.call('SADD', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  return 1
end
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[8], ARGV[1])
local excess = redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[10])
if excess > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[5], excess)
  for i = 1, #popped, 2 do
    local old = popped[i]
    local oidx = redis.call('HGET', KEYS[2], old)
    if oidx then
      local chat = string.match(oidx, '^%d+|(.*)$')
      redis.call('ZREM', ARGV[11] .. 'tasks:chat:' .. chat, old)
    end
    redis.call('HDEL', KEYS[1], old)
    redis.call('HDEL', KEYS[2], old)
    redis.call('ZREM', KEYS[4], old)
    redis.call('EXPIRE', ARGV[11] .. 'tasks:details:' .. old, ARGV[12])
  end
end
return 1
"""

# KEYS: details list. ARGV: line, cap. Append and keep the newest `cap` lines.
DETAIL_APPEND = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return 1
"""


def _answered(method: Callable[P, R]) -> Callable[P, R]:
    """Redis not answering (or refusing) becomes `StoreUnavailable`, which the task code knows
    (it never imports redis): a runner pauses, the engine retries at its next reconcile."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (StoreError, OSError) as exc:
            raise StoreUnavailable(f"Redis did not answer ({exc})") from exc

    return call


class RedisTaskStore:
    """`TaskStore` over the synchronous client (decision 3 of the round's design: reads are
    synchronous in the chat and the dashboard; a write is one round trip). Without `fence`
    writes are unfenced: one node, or tests of the store alone."""

    def __init__(self, state: StateRedis, keys: TaskKeys, *, fence: Fence | None = None,
                 offload: Offload = call_here) -> None:
        self._redis = state.client
        self.keys = keys
        self._fence = fence
        self._offload = offload  # the writes' round trips, in the backend's store thread
        self.problems: list[str] = []
        self._bad: set[tuple[str, int]] = set()  # (task id, hash of the record) reported
        # tasks of chats held here: id -> (lease value, the record's bytes, live object)
        self._live: dict[str, tuple[str, bytes, TaskState]] = {}
        self._checkpoint = self._redis.register_script(CHECKPOINT)
        self._append = self._redis.register_script(DETAIL_APPEND)

    # -- ownership -------------------------------------------------------------------------

    def _lease(self, chat_key: str) -> tuple[str, str] | None:
        """(lease key, value) this node writes the chat's tasks under; ('', '') unfenced."""
        if self._fence is None:
            return "", ""
        return self._fence(chat_key)

    def _cached(self, task_id: str, raw: bytes) -> TaskState | None:
        """The live object, if the record in Redis is still the one this node last wrote or
        read (same bytes) and the chat's lease is still the one it was cached under."""
        entry = self._live.get(task_id)
        if entry is None:
            return None
        held, stored, task = entry
        lease = self._lease(task_chat_key(task))
        if lease is not None and lease[1] == held and stored == raw:
            return task
        del self._live[task_id]  # written elsewhere, or the chat moved: read it again
        return None

    def _keep(self, task: TaskState, raw: bytes) -> TaskState:
        lease = self._lease(task_chat_key(task))
        if lease is not None:
            self._live[task.task_id] = (lease[1], raw, task)
        return task

    # -- reading -------------------------------------------------------------------------

    def _parse(self, task_id: str, raw: bytes | str | None) -> TaskState | None:
        if raw is None:
            return None
        raw = raw.encode("utf-8") if isinstance(raw, str) else raw
        cached = self._cached(task_id, raw)
        if cached is not None:
            return cached
        try:
            task = TaskState.from_dict(json.loads(raw))
        except (KeyError, TypeError, ValueError) as exc:
            mark = (task_id, hash(raw))
            if mark not in self._bad:
                self._bad.add(mark)
                self.problems.append(f"task {task_id} could not be read ({exc!r}); it is "
                                     f"kept in Redis untouched")
                log.error("task %s in Redis could not be read: %r", task_id, exc)
            return None
        return self._keep(task, raw)

    def _many(self, ids: Sequence[bytes | str]) -> list[TaskState]:
        if not ids:
            return []
        names = [_text(i) for i in ids]
        raws = self._redis.hmget(self.keys.tasks, names)
        return [t for name, raw in zip(names, raws, strict=True)
                if (t := self._parse(name, raw)) is not None]

    async def fetch(self, task_id: str) -> TaskState | None:
        return await self._offload(self.get, task_id)

    async def fetch_list(self, *, chat_id: str, provider: str) -> list[TaskState]:
        return await self._offload(self.list, chat_id=chat_id, provider=provider)

    async def fetch_detail_tail(self, task_id: str, count: int) -> list[str]:
        return await self._offload(self.detail_tail, task_id, count)

    async def fetch_unfinished(self, *,
                               chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        return await self._offload(self.unfinished, chats=chats)

    @_answered
    def get(self, task_id: str) -> TaskState | None:
        return self._parse(task_id, self._redis.hget(self.keys.tasks, task_id))

    @_answered
    def list(self, *, status: TaskStatus | None = None, chat_id: str | None = None,
             provider: str | None = None, limit: int | None = None) -> list[TaskState]:
        listing, filtered = self.keys.tasks_created, status is not None
        if chat_id is not None and provider is not None:
            listing = self.keys.tasks_of_chat(f"{provider}:{chat_id}")
        elif chat_id is not None or provider is not None:
            filtered = True  # half a chat key: every task is looked at
        end = -1 if filtered or limit is None else limit - 1
        found = [t for t in self._many(self._redis.zrevrange(listing, 0, end))
                 if (status is None or t.status is status)
                 and (chat_id is None or t.chat_id == chat_id)
                 and (provider is None or t.provider == provider)]
        return found[:limit]

    @_answered
    def count_unfinished(self) -> int:
        return int(self._redis.scard(self.keys.tasks_open))

    @_answered
    def unfinished(self, *, chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        """With `chats`, the index (`revision|chat`) is read first and only the records of
        accepted chats are fetched: the engine asks this every few seconds."""
        ids = sorted(_text(i) for i in self._redis.smembers(self.keys.tasks_open))
        if chats is not None and ids:
            index = self._redis.hmget(self.keys.tasks_index, ids)
            ids = [i for i, entry in zip(ids, index, strict=True)
                   if entry is not None and chats(_text(entry).partition("|")[2])]
        tasks = [t for t in self._many(ids) if not t.status.finished]
        return sorted(tasks, key=lambda t: t.created_at)

    # -- writing -------------------------------------------------------------------------

    async def add(self, task: TaskState) -> None:
        check_task_id(task.task_id)
        await self._write(task, new=True)

    async def checkpoint(self, task: TaskState) -> None:
        """One script: fenced by the chat's partition lease and by the stored revision."""
        await self._write(task, new=False)

    async def record_answer(self, task: TaskState) -> None:
        """On the node holding the chat, a checkpoint. Elsewhere (a dashboard of another node)
        only for a task that waits, so no loop drives it anywhere: the script checks that the
        stored task waits and that its revision is the one read here; the holder of the chat
        sees the record change and resumes the task at its next reconcile."""
        chat = task_chat_key(task)
        await self._write(task, new=False, answer=self._lease(chat) is None)

    async def _write(self, task: TaskState, *, new: bool, answer: bool = False) -> None:
        """The record is made here, on the event loop that owns the task; only the script's
        round trip runs in the store thread."""
        chat = task_chat_key(task)
        lease = ("", "") if answer else self._lease(chat)
        if lease is None:
            self._live.pop(task.task_id, None)
            raise TaskFenced(f"task {task.task_id} belongs to chat {chat}, which another node "
                             f"handles now (or none yet); it runs and is answered there")
        expected = task.revision
        task.revision += 1
        task.updated_at = now()
        text = json.dumps(task.to_dict(), ensure_ascii=False, separators=(",", ":"),
                          default=str)
        lease_key, lease_value = lease
        try:
            result = await self._offload(self._run_checkpoint, task, text, chat, lease_key,
                                         lease_value, "new" if new else str(expected), answer)
        except (StoreError, OSError) as exc:
            task.revision = expected  # perhaps not written: read it again before going on
            self._live.pop(task.task_id, None)
            raise StoreUnavailable(f"Redis did not take the checkpoint of task "
                                       f"{task.task_id} ({exc})") from exc
        if result == 1:
            if not answer:
                self._keep(task, text.encode("utf-8"))
            return
        task.revision = expected
        self._live.pop(task.task_id, None)
        if result == -3:
            raise ValueError(f"task {task.task_id} already exists")
        if result == -1:
            raise TaskFenced(f"task {task.task_id}: the lease of chat {chat} is no longer "
                             f"this node's; the node that holds it runs the task")
        if result == -4:
            raise TaskFenced(f"task {task.task_id} is running on the node that holds chat "
                             f"{chat}; answer or cancel it there (in its chat)")
        raise TaskFenced(f"task {task.task_id} was written elsewhere since this node read it "
                         f"(revision {expected}); it is read again before going on")

    def _run_checkpoint(self, task: TaskState, text: str, chat: str, lease_key: str,
                        lease_value: str, expected: str, answer: bool) -> int:
        return int(self._checkpoint(
            keys=[self.keys.tasks, self.keys.tasks_index, self.keys.tasks_open,
                  self.keys.tasks_created, self.keys.tasks_finished,
                  self.keys.tasks_of_chat(chat), lease_key or self.keys.tasks],
            args=[task.task_id, text, expected, task.revision, lease_value,
                  FINISHED if task.status.finished else "0", task.created_at,
                  task.updated_at, chat, base.KEEP_FINISHED, self.keys.prefix,
                  DETAIL_TTL_S, "1" if answer else "0"]))

    # -- detail logs ---------------------------------------------------------------------

    def detail_location(self, task_id: str) -> str:
        check_task_id(task_id)
        return f"redis:{self.keys.task_details(task_id)}"

    async def append_detail(self, task_id: str, line: str, *, at: float | None = None) -> str:
        check_task_id(task_id)
        await self._offload(self._append_now, task_id, detail_entry(line, at))
        return self.detail_location(task_id)

    @_answered
    def _append_now(self, task_id: str, entry: str) -> None:
        self._append(keys=[self.keys.task_details(task_id)], args=[entry, DETAIL_CAP])

    @_answered
    def detail_tail(self, task_id: str, count: int) -> list[str]:
        try:
            check_task_id(task_id)
        except ValueError:
            return []
        return [_text(line) for line in
                self._redis.lrange(self.keys.task_details(task_id), -count, -1)]


class PartitionFence:
    """`Fence` from a Redis backend's partition leases: a chat's tasks are written under the
    lease of the chat's partition, while this node holds it (its local deadline included, so a
    node cut off from Redis stops writing before anyone else can take the partition). Until
    the backend has started and taken partitions nothing is held, so nothing is written."""

    def __init__(self, backend: _PartitionSource) -> None:
        self._backend = backend

    def __call__(self, chat_key: str) -> tuple[str, str] | None:
        lease = self._backend.chat_lease(chat_key)
        if lease is None:
            return None
        return self._backend.keys.lease(lease.name), lease.value

    def owns(self, chat_key: str) -> bool:
        """The engine's `owns`: this node runs the chat's tasks now."""
        return self(chat_key) is not None


class _PartitionSource(Protocol):
    """What `PartitionFence` reads from a `RedisBackend`."""

    @property
    def keys(self) -> Keys: ...

    def chat_lease(self, chat_key: str) -> Lease | None: ...


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value

