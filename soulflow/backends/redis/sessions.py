"""Conversation history on Redis: the same records as `runtime/sessions/<key>.jsonl`.

A session is a list of json messages (`session:<key>`); its metadata line, its byte count and
its last update live in three small shared structures, so `list_sessions()` is one sorted-set
read instead of a scan. An append is one MULTI/EXEC (atomic, one round trip): push, count the
bytes, note the update, and set the metadata if it is the first message. Nothing is cached
between calls: any node holding the chat may have appended since (r_design decision 3), and
the tail the agent reads each turn is one LRANGE.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from soulflow.backends.base import METADATA_TYPE, SessionInfo
from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.sync_client import StateRedis


def _encode(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _decode(raw: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _decode_all(raws: list[Any]) -> list[dict[str, Any]]:
    return [record for raw in raws if (record := _decode(raw)) is not None]


class RedisSessionStore:
    """`SessionStore` on Redis (backends/base.py has the contract, backends/file/sessions.py the
    file one)."""

    def __init__(self, state: StateRedis, *, redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._redis = state.client
        self._keys = AgentKeys(state.prefix)
        self._redact = redact
        self._clock = clock

    def append(self, key: str, message: dict[str, Any]) -> None:
        record = {"at": self._clock(), **message}
        if self._redact is not None and isinstance(record.get("content"), str):
            record["content"] = self._redact(record["content"])  # a last net behind sealing
        line = _encode(record)
        meta = _encode({"_type": METADATA_TYPE, "key": key, "created_at": record["at"]})
        pipe = self._redis.pipeline(transaction=True)
        pipe.rpush(self._keys.session(key), line)
        pipe.hsetnx(self._keys.sessions_meta, key, meta)
        pipe.hincrby(self._keys.sessions_bytes, key, len(line.encode("utf-8")) + 1)
        pipe.zadd(self._keys.sessions_updated, {key: float(record["at"])})
        pipe.execute()

    def last(self, key: str, count: int) -> list[dict[str, Any]]:
        if count <= 0:
            return []
        return _decode_all(self._redis.lrange(self._keys.session(key), -count, -1))

    def range(self, key: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
        if end is not None and end <= start:
            return []
        stop = -1 if end is None else end - 1
        return _decode_all(self._redis.lrange(self._keys.session(key), start, stop))

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
