"""Decisions the agent must respect ("always answer in Korean", "deploy window is Friday").

`DecisionService` is what the agent's context, the ops dedupe and the dashboard use: the rules
of `rules.py` over the backend's `DecisionStore` (``runtime/decisions/index.json``, or a Redis
hash shared by every node).
"""

from __future__ import annotations

import time

from soulflow.backends.base import DecisionStore
from soulflow.decision.rules import Decision, canonical_key


class DecisionService:
    """Set, get, list and dedupe decisions by canonical key, over the backend's store."""

    def __init__(self, records: DecisionStore) -> None:
        self.records = records

    def set(self, key: str, value: str, *, priority: int = 0, source: str = "") -> Decision:
        """Store a decision; returns the decision now in force (which may be the older one)."""
        return self.records.put_unless_kept(
            Decision(canonical_key(key), value, priority, source, time.time()))

    def dedupe(self) -> int:
        """Merge entries whose keys canonicalise alike (a hand-edited index, or one written
        before keys were canonical): the higher priority wins, then the newer. Keys with no
        letter or digit are dropped. Returns how many entries went; run on a schedule by ops."""
        return self.records.dedupe()

    def get(self, key: str) -> Decision | None:
        return self.records.get(canonical_key(key))

    def remove(self, key: str) -> bool:
        return self.records.delete(canonical_key(key))

    async def refresh(self) -> None:
        """Read the decisions ahead for the `list()`s that follow (a shared store answers
        them from that copy; see `DecisionStore.refresh`)."""
        await self.records.refresh()

    def list(self) -> list[Decision]:
        """Highest priority first, then most recent."""
        return sorted(self.records.all().values(), key=lambda d: (-d.priority, -d.updated_at))

    def compact_text(self, limit: int = 20) -> str:
        """A short bullet list for the system prompt."""
        return "\n".join(f"- {d.key}: {d.value}" for d in self.list()[:limit])
