"""The approval-message map on Redis: a reaction on any node finds the approval it answers.

`approvals:<name>` is a hash from `chat_key:platform message id` to `{run_id, approval_id}`;
`approvals:<name>:run:<run id>` lists a run's fields so `forget_run` drops them in one script
when the run finishes. Writes are single transactions, so two nodes never overwrite each
other's entries (the file map is rewritten whole by its one daemon).
"""

from __future__ import annotations

import json

from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.sync_client import StateRedis

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


class RedisApprovalMap:
    """`ApprovalMap` on Redis (backends/base.py has the contract, backends/file/approvals.py
    the file map).

    `name` keeps several maps apart, as the file paths do: `messages` for agent runs,
    `task-prompts` for the task engine's prompts."""

    def __init__(self, state: StateRedis, name: str = "messages") -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._name = name
        self._forget = self._redis.register_script(_FORGET)

    @staticmethod
    def _field(chat_key: str, platform_id: str) -> str:
        return f"{chat_key}:{platform_id}"

    def remember(self, chat_key: str, platform_ids: list[str], run_id: str,
                 approval_id: str) -> None:
        if not platform_ids:
            return
        value = json.dumps({"run_id": run_id, "approval_id": approval_id})
        fields = [self._field(chat_key, platform_id) for platform_id in platform_ids]
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self._keys.approvals(self._name), mapping=dict.fromkeys(fields, value))
        pipe.sadd(self._keys.approvals_of_run(self._name, run_id), *fields)
        pipe.execute()

    def lookup(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        raw = self._redis.hget(self._keys.approvals(self._name),
                               self._field(chat_key, platform_id))
        if raw is None:
            return None
        entry = json.loads(raw)
        return {str(k): str(v) for k, v in entry.items()} if isinstance(entry, dict) else None

    def forget_run(self, run_id: str) -> None:
        self._forget(keys=[self._keys.approvals(self._name),
                           self._keys.approvals_of_run(self._name, run_id)], args=[run_id])

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Every write is stored before it returns."""
        return True
