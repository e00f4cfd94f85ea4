"""Decisions the agent must respect ("always answer in Korean", "deploy window is Friday").

Keys are canonicalised so the same decision phrased twice is stored once; a higher or equal
priority overrides, a lower one does not.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import read_json, write_json_atomic

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)


def canonical_key(key: str) -> str:
    """Lower-case words joined by `_`: `Reply Language` and `reply-language` are one key."""
    canonical = _NON_WORD.sub("_", key.casefold()).strip("_")
    if not canonical:
        raise ValueError("a decision key needs at least one letter or digit")
    return canonical


@dataclass(slots=True)
class Decision:
    key: str
    value: str
    priority: int = 0
    source: str = ""
    updated_at: float = 0.0


class DecisionService:
    """`runtime/decisions/index.json`: set, get, list, dedupe by canonical key."""

    VERSION = 1

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._decisions = self._load()

    def _load(self) -> dict[str, Decision]:
        data = read_json(self.path, {"version": self.VERSION, "decisions": {}})
        raw = data.get("decisions") if isinstance(data, dict) else None
        decisions: dict[str, Decision] = {}
        for key, value in (raw or {}).items():
            if isinstance(value, dict) and "value" in value:
                decisions[key] = Decision(
                    key=key,
                    value=str(value["value"]),
                    priority=int(value.get("priority", 0)),
                    source=str(value.get("source", "")),
                    updated_at=float(value.get("updated_at", 0.0)),
                )
        return decisions

    def _save(self) -> None:
        payload: dict[str, Any] = {
            "version": self.VERSION,
            "decisions": {k: asdict(d) for k, d in self._decisions.items()},
        }
        write_json_atomic(self.path, payload)

    def set(self, key: str, value: str, *, priority: int = 0, source: str = "") -> Decision:
        """Store a decision; returns the decision now in force (which may be the older one)."""
        canonical = canonical_key(key)
        with self._lock:
            current = self._decisions.get(canonical)
            same = (value, priority)
            unchanged = current is not None and (current.value, current.priority) == same
            if current is not None and (current.priority > priority or unchanged):
                return current
            decision = Decision(canonical, value, priority, source, time.time())
            self._decisions[canonical] = decision
            self._save()
            return decision

    def dedupe(self) -> int:
        """Merge entries whose keys canonicalise alike (a hand-edited index, or one written
        before keys were canonical): the higher priority wins, then the newer. Keys with no
        letter or digit are dropped. Returns how many entries went; run on a schedule by ops."""
        with self._lock:
            merged: dict[str, Decision] = {}
            for stored, decision in self._decisions.items():
                try:
                    key = canonical_key(stored)
                except ValueError:
                    continue
                candidate = Decision(key, decision.value, decision.priority, decision.source,
                                     decision.updated_at)
                current = merged.get(key)
                if current is None or (candidate.priority, candidate.updated_at) > \
                        (current.priority, current.updated_at):
                    merged[key] = candidate
            removed = len(self._decisions) - len(merged)
            if removed or list(merged) != list(self._decisions):
                self._decisions = merged
                self._save()
            return removed

    def get(self, key: str) -> Decision | None:
        return self._decisions.get(canonical_key(key))

    def remove(self, key: str) -> bool:
        with self._lock:
            removed = self._decisions.pop(canonical_key(key), None) is not None
            if removed:
                self._save()
            return removed

    def list(self) -> list[Decision]:
        """Highest priority first, then most recent."""
        return sorted(self._decisions.values(), key=lambda d: (-d.priority, -d.updated_at))

    def compact_text(self, limit: int = 20) -> str:
        """A short bullet list for the system prompt."""
        return "\n".join(f"- {d.key}: {d.value}" for d in self.list()[:limit])
