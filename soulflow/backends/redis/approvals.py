"""The approval-message map on Redis: a reaction on any node finds the approval it answers.

`approvals:<name>` is a hash from `chat_key:platform message id` to `{run_id, approval_id}`;
`approvals:<name>:run:<run id>` lists a run's fields so `forget_run` drops them in one script
when the run finishes. Each write only adds fields or drops a run's own, so two nodes never
overwrite each other's entries (the file map is rewritten whole by its one daemon).

While the backend's writer runs (writeback.py), `remember` and `forget_run` are queued and go
with its next batch, in order: a prompt's bookkeeping costs the send no round trip on the
event loop. Reads see this node's queued changes first; `find` reads on the asynchronous
client (a reaction's lookup), `lookup` on the synchronous one (tools and tests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.backends.redis.writeback import Batch, WriteBehind

# KEYS: the map, the run's set. Deletes the run's fields that still point at the run.
_FORGET = """
local fields = redis.call('SMEMBERS', KEYS[2])
local dropped = 0
for _, field in ipairs(fields) do
  local raw = redis.call('HGET', KEYS[1], field)
  if raw and cjson.decode(raw)['run_id'] == ARGV[1] then
    redis.call('HDEL', KEYS[1], field)
    dropped = dropped + 1
  end
end
redis.call('DEL', KEYS[2])
return dropped
"""


@dataclass(frozen=True, slots=True)
class _Remember:
    fields: tuple[str, ...]
    value: str  # json {run_id, approval_id}
    run_id: str


@dataclass(frozen=True, slots=True)
class _Forget:
    run_id: str


_Change = _Remember | _Forget


@dataclass(slots=True)
class _StagedChanges:
    store: RedisApprovalMap
    changes: list[_Change]

    def written(self, results: list[Any]) -> None:
        del self.store._in_flight[:len(self.changes)]

    def failed(self) -> None:
        del self.store._in_flight[:len(self.changes)]
        self.store._queued[:0] = self.changes


class RedisApprovalMap:
    """`ApprovalMap` on Redis (backends/base.py has the contract, backends/file/approvals.py
    the file map).

    `name` keeps several maps apart, as the file paths do: `messages` for agent runs,
    `task-prompts` for the task engine's prompts."""

    def __init__(self, state: StateRedis, name: str = "messages", *,
                 writer: WriteBehind | None = None) -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._name = name
        self._forget = self._redis.register_script(_FORGET)
        self._queued: list[_Change] = []
        self._in_flight: list[_Change] = []
        self._writer = writer
        if writer is not None:
            writer.register(self, {"approvals_forget": _FORGET})

    @staticmethod
    def _field(chat_key: str, platform_id: str) -> str:
        return f"{chat_key}:{platform_id}"

    def remember(self, chat_key: str, platform_ids: list[str], run_id: str,
                 approval_id: str) -> None:
        if not platform_ids:
            return
        change = _Remember(tuple(self._field(chat_key, p) for p in platform_ids),
                           json.dumps({"run_id": run_id, "approval_id": approval_id}), run_id)
        if self._queue(change):
            return
        pipe = self._redis.pipeline(transaction=True)
        self._write(pipe, change)
        pipe.execute()

    def forget_run(self, run_id: str) -> None:
        if not self._queue(_Forget(run_id)):
            self._write(self._redis, _Forget(run_id))

    def _queue(self, change: _Change) -> bool:
        """Queue `change` for the writer's next batch; False when no writer runs."""
        if self._writer is None or not self._writer.running:
            return False
        self._queued.append(change)
        self._writer.notify()
        return True

    def _write(self, pipe: Any, change: _Change) -> None:
        """One change's commands on a pipeline or a `Batch` (both take `execute_command`)."""
        table, of_run = self._keys.approvals(self._name), \
            self._keys.approvals_of_run(self._name, change.run_id)
        if isinstance(change, _Remember):
            pipe.execute_command("HSET", table, *(part for field in change.fields
                                                  for part in (field, change.value)))
            pipe.execute_command("SADD", of_run, *change.fields)
        elif isinstance(pipe, Batch):
            pipe.script("approvals_forget", [table, of_run], [change.run_id])
        else:
            self._forget(keys=[table, of_run], args=[change.run_id])

    def stage(self, batch: Batch, *, full: bool) -> _StagedChanges | None:
        """The writer's call: every queued change, in order (they are few, and a prompt's
        reaction may come at once)."""
        if not self._queued:
            return None
        changes, self._queued = self._queued, []
        for change in changes:
            self._write(batch, change)
        self._in_flight.extend(changes)
        return _StagedChanges(self, changes)

    def lookup(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        field = self._field(chat_key, platform_id)
        known, raw = self._unwritten(field)
        if not known:
            raw = self._redis.hget(self._keys.approvals(self._name), field)
        return self._entry(field, raw)

    async def find(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        if self._writer is None or not self._writer.running:
            return self.lookup(chat_key, platform_id)
        field = self._field(chat_key, platform_id)
        known, raw = self._unwritten(field)
        if not known:
            raw = await self._writer.client.hget(self._keys.approvals(self._name), field)
        return self._entry(field, raw)

    def _unwritten(self, field: str) -> tuple[bool, str | bytes | None]:
        """What this node's changes still on their way say of `field`: (True, value) when
        the last of them sets it, else (False, None): Redis has the answer."""
        for change in reversed(self._in_flight + self._queued):
            if isinstance(change, _Remember) and field in change.fields:
                return True, change.value
        return False, None

    def _entry(self, field: str, raw: str | bytes | None) -> dict[str, str] | None:
        if raw is None:
            return None
        entry = json.loads(raw)
        if not isinstance(entry, dict):
            return None
        if any(isinstance(c, _Forget) and c.run_id == entry.get("run_id")
               for c in self._in_flight + self._queued):
            return None  # its run finished; the forget is on its way
        return {str(k): str(v) for k, v in entry.items()}

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Nothing waits in this process that a stop would lose: the writer sends what is
        queued before the backend closes."""
        return True
