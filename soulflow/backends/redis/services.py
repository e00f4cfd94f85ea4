"""Small shared state of the single-runner services on Redis.

* `heartbeat:state` - hash: the last heartbeat tick (`last_tick_at`, `last_status`,
  `last_outcome`), so the node that takes the heartbeat over keeps its interval.
* `ops:notice:<problem>` - string with a TTL of one notice interval: a node told the notice
  chat about this problem (`SET NX PX`), so a problem every node sees (a model provider down,
  Redis itself flapping) is told once per interval across the cluster, not once per node.
"""

from __future__ import annotations

from soulflow.backends.redis.clients import SyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text

__all__ = ["RedisHeartbeatState", "RedisNoticeClaims"]


class RedisHeartbeatState:
    """`HeartbeatStateStore` (backends/base.py) on Redis: strings in a hash,
    read back by `HeartbeatState.from_dict` (None is stored as "")."""

    def __init__(self, state: StateRedis) -> None:
        self._client: SyncStoreRedis = state.client
        self._key = ServiceKeys(state.prefix).heartbeat_state

    def load(self) -> dict[str, object]:
        return {text(k): text(v) for k, v in self._client.hgetall(self._key).items()}

    def save(self, data: dict[str, object]) -> None:
        values = {k: ("" if v is None else repr(v) if isinstance(v, float) else str(v))
                  for k, v in data.items()}
        self._client.hset(self._key, mapping=values)


class RedisNoticeClaims:
    """`NoticeClaims`: `claim(problem, ttl_s)` is True for the one node that tells this problem
    now."""

    def __init__(self, state: StateRedis, node_id: str) -> None:
        self._client: SyncStoreRedis = state.client
        self._keys = ServiceKeys(state.prefix)
        self._node_id = node_id

    def __call__(self, problem: str, ttl_s: float) -> bool:
        return bool(self._client.set(self._keys.notice(problem), self._node_id, nx=True,
                                     px=max(1, int(ttl_s * 1000))))
