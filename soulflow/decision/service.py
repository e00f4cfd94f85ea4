"""Decisions the agent must respect ("always answer in Korean", "deploy window is Friday").

Keys are canonicalised so the same decision phrased twice is stored once; a higher or equal
priority overrides, a lower one does not.

`DecisionService` holds those rules; where the decisions are kept is a `DecisionRecords`:
`FileDecisions` (``runtime/decisions/index.json``, the default) or, with the Redis backend, a
hash shared by every node (`soulflow/backends/redis/decisions.py`). The priority rule must hold
across nodes, so it is applied inside the store's own atomic write (`put_unless_kept`), not
read-then-written by the service.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

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


def keeps_current(current: Decision | None, value: str, priority: int) -> bool:
    """The priority rule: a stored decision stays when it outranks the new one, or says the
    same thing at the same priority (a repeat does not refresh `updated_at`)."""
    return current is not None and (current.priority > priority or
                                    (current.value, current.priority) == (value, priority))


def merge_canonical(stored: dict[str, Decision]) -> dict[str, Decision]:
    """Entries whose keys canonicalise alike merged into one (higher priority wins, then the
    newer); keys with no letter or digit dropped."""
    merged: dict[str, Decision] = {}
    for key_as_stored, decision in stored.items():
        try:
            key = canonical_key(key_as_stored)
        except ValueError:
            continue
        candidate = Decision(key, decision.value, decision.priority, decision.source,
                             decision.updated_at)
        current = merged.get(key)
        if current is None or (candidate.priority, candidate.updated_at) > \
                (current.priority, current.updated_at):
            merged[key] = candidate
    return merged


class DecisionRecords(Protocol):
    """Where decisions are kept; every method is atomic on its own."""

    def all(self) -> dict[str, Decision]:
        """Every stored entry by its key as stored."""

    def get(self, key: str) -> Decision | None: ...

    def put_unless_kept(self, decision: Decision) -> Decision:
        """Store `decision` unless `keeps_current` says the stored one stays; the decision in
        force afterwards."""

    def delete(self, key: str) -> bool: ...

    def dedupe(self) -> int:
        """Replace the entries by `merge_canonical(...)` of them; how many went."""


class FileDecisions:
    """`runtime/decisions/index.json`, loaded once (the daemon is its only writer) and
    rewritten atomically on every change."""

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

    def all(self) -> dict[str, Decision]:
        return dict(self._decisions)

    def get(self, key: str) -> Decision | None:
        return self._decisions.get(key)

    def put_unless_kept(self, decision: Decision) -> Decision:
        with self._lock:
            current = self._decisions.get(decision.key)
            if keeps_current(current, decision.value, decision.priority):
                assert current is not None
                return current
            self._decisions[decision.key] = decision
            self._save()
            return decision

    def delete(self, key: str) -> bool:
        with self._lock:
            removed = self._decisions.pop(key, None) is not None
            if removed:
                self._save()
            return removed

    def dedupe(self) -> int:
        with self._lock:
            merged = merge_canonical(self._decisions)
            removed = len(self._decisions) - len(merged)
            if removed or list(merged) != list(self._decisions):
                self._decisions = merged
                self._save()
            return removed


class DecisionService:
    """Set, get, list and dedupe decisions by canonical key, over `records` (the file
    ``runtime/decisions/index.json`` when given a path)."""

    def __init__(self, path: Path | None = None, *,
                 records: DecisionRecords | None = None) -> None:
        if records is None:
            if path is None:
                raise TypeError("DecisionService needs a path or records")
            records = FileDecisions(path)
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

    def list(self) -> list[Decision]:
        """Highest priority first, then most recent."""
        return sorted(self.records.all().values(), key=lambda d: (-d.priority, -d.updated_at))

    def compact_text(self, limit: int = 20) -> str:
        """A short bullet list for the system prompt."""
        return "\n".join(f"- {d.key}: {d.value}" for d in self.list()[:limit])
