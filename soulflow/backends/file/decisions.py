"""The decisions on files: `runtime/decisions/index.json`, `{"version": 1, "decisions": {key:
{"key", "value", "priority", "source", "updated_at"}}}`."""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soulflow.decision.rules import Decision, keeps_current, merge_canonical
from soulflow.storage.atomic import read_json, write_json_atomic


class FileDecisionStore:
    """`DecisionStore` in `runtime/decisions/index.json`, loaded once (the daemon is its only
    writer) and rewritten atomically on every change."""

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

    async def refresh(self) -> None:
        """Nothing to read ahead: the index is in memory."""

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
