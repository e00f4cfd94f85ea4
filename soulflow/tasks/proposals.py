"""Plans shown to a chat, waiting for a yes, an edit or a cancel (`runtime/tasks/proposals.json`).

A plan with risky steps is shown before it runs; until the requester (or an admin) answers, it
lives here, one per chat, written atomically so a restart keeps it: the answer given after a
restart still starts the task.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import read_json, write_json_atomic
from soulflow.tasks.model import TaskGraph, now


@dataclass(slots=True)
class Proposal:
    """A plan waiting for its requester: the request, its edits so far and the current graph."""

    chat: dict[str, Any]  # provider, chat_id, thread_id
    requested_by: str
    request: str
    title: str
    graph: dict[str, Any]
    risks: list[str] = field(default_factory=list)
    edits: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=now)

    def task_graph(self) -> TaskGraph:
        return TaskGraph.from_dict(self.graph)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        return cls(chat=dict(data["chat"]), requested_by=str(data.get("requested_by", "")),
                   request=str(data["request"]), title=str(data.get("title", "")),
                   graph=dict(data["graph"]), risks=list(data.get("risks", [])),
                   edits=list(data.get("edits", [])),
                   created_at=float(data.get("created_at", 0.0)))


class ProposalStore:
    """One pending proposal per chat key (`provider:chat_id`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        data = read_json(path, {})  # unreadable: moved aside by read_json, start empty
        self._items: dict[str, Proposal] = {}
        for key, record in (data.items() if isinstance(data, dict) else []):
            try:
                self._items[key] = Proposal.from_dict(record)
            except (KeyError, TypeError, ValueError):
                continue

    def get(self, chat_key: str) -> Proposal | None:
        return self._items.get(chat_key)

    def put(self, chat_key: str, proposal: Proposal) -> None:
        with self._lock:
            self._items[chat_key] = proposal
            self._write()

    def pop(self, chat_key: str) -> Proposal | None:
        with self._lock:
            proposal = self._items.pop(chat_key, None)
            if proposal is not None:
                self._write()
            return proposal

    def _write(self) -> None:
        write_json_atomic(self.path, {k: asdict(v) for k, v in self._items.items()})
