"""Decisions on Redis: one hash shared by every node, `decisions` (canonical key → json
``{value, priority, source, updated_at}``, the fields of the file's entries).

Setting a decision is one Lua script that applies the priority rule (`keeps_current`) and
writes in the same step, so two nodes setting the same canonical key at once end with the one
the rule picks, never the one that happened to write last.

**Read ahead.** The agent reads the decisions for every prompt it builds. `refresh()` reads
the hash on the asynchronous client (before a turn, on each ops tick, for the dashboard), and
`all()` answers from that copy, so a prompt never waits for Redis with the event loop held;
this node's own changes are applied to the copy as they are written. A decision another node
(or `soulflow decision`) sets reaches this node's prompts with its next turn or ops tick.
Before the first refresh `all()` reads the hash itself.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from redis.client import Pipeline

from soulflow.backends.redis.clients import AsyncStoreRedis, SyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text
from soulflow.decision.rules import Decision, merge_canonical

__all__ = ["RedisDecisionStore"]

log = logging.getLogger(__name__)

# KEYS: hash. ARGV: canonical key, value, priority, the new record (json).
# The same rule as decision.service.keeps_current: the stored one stays if it outranks the new
# one or says the same at the same priority. Returns the record in force.
DECISION_PUT = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local current = cjson.decode(raw)
  local priority = tonumber(current.priority) or 0
  local wanted = tonumber(ARGV[3])
  if priority > wanted or (current.value == ARGV[2] and priority == wanted) then
    return raw
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return ARGV[4]
"""


REFRESH_EVERY_S = 0.5  # `refresh()`es closer together than this read nothing


class RedisDecisionStore:
    """`DecisionStore` on Redis (see the module docstring)."""

    def __init__(self, state: StateRedis, *, client: AsyncStoreRedis | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client: SyncStoreRedis = state.client
        self._key = ServiceKeys(state.prefix).decisions
        self._put = self._client.register_script(DECISION_PUT)
        self._async = client  # for `refresh`
        self._clock = clock
        self._copy: dict[str, Decision] | None = None  # as the last `refresh` read them
        self._refreshed_at = float("-inf")

    def all(self) -> dict[str, Decision]:
        if self._copy is not None:
            return dict(self._copy)
        return _parse_all(self._client.hgetall(self._key))

    async def refresh(self) -> None:
        if self._async is None or self._clock() - self._refreshed_at < REFRESH_EVERY_S:
            return
        self._refreshed_at = self._clock()
        self._copy = _parse_all(await self._async.hgetall(self._key))

    def get(self, key: str) -> Decision | None:
        raw = self._client.hget(self._key, key)
        return None if raw is None else _parse(key, raw)

    def put_unless_kept(self, decision: Decision) -> Decision:
        record = _dump(decision)
        raw = self._put(keys=[self._key], args=[decision.key, decision.value,
                                                decision.priority, record])
        kept = _parse(decision.key, raw) or decision
        if self._copy is not None:
            self._copy[kept.key] = kept
        return kept

    def delete(self, key: str) -> bool:
        if self._copy is not None:
            self._copy.pop(key, None)
        return bool(self._client.hdel(self._key, key))

    def dedupe(self) -> int:
        """Rewrite the hash merged, in a WATCH transaction: a decision another node sets
        meanwhile makes it start over instead of being overwritten."""
        removed = 0

        def merge(pipe: Pipeline) -> None:
            nonlocal removed
            stored = {text(f): d for f, raw in pipe.hgetall(self._key).items()
                      if (d := _parse(text(f), raw)) is not None}
            merged = merge_canonical(stored)
            removed = len(stored) - len(merged)
            doomed = [key for key in stored if key not in merged]
            changed = {key: d for key, d in merged.items() if stored.get(key) != d}
            pipe.multi()
            if doomed:
                pipe.hdel(self._key, *doomed)
            if changed:
                pipe.hset(self._key, mapping={key: _dump(d) for key, d in changed.items()})

        self._client.transaction(merge, self._key)
        self._refreshed_at = float("-inf")  # the next `refresh` reads the merged hash
        return removed


def _dump(decision: Decision) -> str:
    data: dict[str, Any] = asdict(decision)
    data.pop("key")
    return json.dumps(data, ensure_ascii=False)


def _parse_all(raws: dict[Any, Any]) -> dict[str, Decision]:
    found: dict[str, Decision] = {}
    for field, raw in raws.items():
        key = text(field)
        decision = _parse(key, raw)
        if decision is not None:
            found[key] = decision
    return found


def _parse(key: str, raw: bytes | str) -> Decision | None:
    try:
        data = json.loads(raw)
        return Decision(key=key, value=str(data["value"]), priority=int(data.get("priority", 0)),
                        source=str(data.get("source", "")),
                        updated_at=float(data.get("updated_at", 0.0)))
    except (ValueError, TypeError, KeyError) as exc:
        log.error("decisions: skipping an unreadable record %r in Redis (%s)", key, exc)
        return None
