"""`Proposal`: a task plan shown to a chat and waiting for its requester's answer.

A plain record (JSON in and out), kept apart from the chat code that shows and answers it
(proposals.py) so the stores that keep it, the file and the Redis hash, can share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
