"""Workflow events on Redis: a capped stream every node appends to, deduplicated across nodes.

`record` is one script: `SET events:seen:<id> NX EX <ttl>` and, only if that set it, `XADD
events:workflow MAXLEN ~ <cap>`; so a step replayed on the node that took a chat over (the same
`event_id`, docs/tasks.md) is recorded once, whichever node replays it, and a crash cannot
separate the dedupe mark from the event. The stream keeps about the newest `max_events` (Redis
trims whole blocks, hence "about"); the seen ids live `seen_ttl_s` (7 days; one per
workflow event, i.e. per task step, not per message).
Every node's dashboard reads the same stream, so it lists the events of tasks run anywhere.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from soulflow.backends.base import Offload, call_here
from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.sync_client import StateRedis

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS = 10_000
SEEN_TTL_S = 7 * 24 * 3600

# KEYS: seen marker, stream. ARGV: event json, seen ttl s, max length.
RECORD = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'e', ARGV[1])
return 1
"""


class RedisWorkflowLog:
    """`WorkflowLog` (backends/base.py) on one Redis, over the synchronous client: an event
    is written from the task loop in one round trip, in the backend's store thread
    (`offload`), so a slow Redis delays the task, not the event loop."""

    def __init__(self, state: StateRedis, keys: TaskKeys, *,
                 max_events: int = DEFAULT_MAX_EVENTS, seen_ttl_s: int = SEEN_TTL_S,
                 offload: Offload = call_here) -> None:
        self._redis = state.client
        self.keys = keys
        self.max_events = max_events
        self.seen_ttl_s = seen_ttl_s
        self._offload = offload
        self._record = self._redis.register_script(RECORD)

    def seen(self, event_id: str) -> bool:
        return bool(self._redis.exists(self.keys.workflow_seen(event_id)))

    async def record(self, record: dict[str, Any]) -> bool:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        written = await self._offload(
            self._record, keys=[self.keys.workflow_seen(str(record["event_id"])),
                                self.keys.workflow_events],
            args=[text, self.seen_ttl_s, self.max_events])
        return bool(int(written))

    def recent(self, count: int) -> list[dict[str, Any]]:
        entries = self._redis.xrevrange(self.keys.workflow_events, count=count)
        records = []
        for _entry_id, fields in reversed(entries):
            raw = fields.get(b"e", fields.get("e"))
            try:
                records.append(json.loads(raw))
            except (TypeError, ValueError):
                log.error("a workflow event in Redis could not be read; skipped")
        return records

    async def close(self) -> None:
        """Nothing buffered: every event is in Redis when `record` returns."""
