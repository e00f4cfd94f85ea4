"""The typed events of an agent run.

A run is nothing but its events, appended to `runtime/threads/<run_id>.jsonl` before the
daemon acts on them. Replaying them through the reducer gives the run's state at any point,
which is how a run resumes after `kill -9`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

RUN_STARTED = "run_started"
MODEL_TURN = "model_turn"
TOOL_CALL_STARTED = "tool_call_started"
TOOL_RESULT = "tool_result"
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_DECIDED = "approval_decided"
INFO_REQUESTED = "info_requested"
USER_REPLY = "user_reply"
# a piece of the streamed answer reached the chat: its platform message id, so the final text
# (or the same run driven again after a crash) edits that message instead of sending another
REPLY_SHOWN = "reply_shown"
ERROR = "error"
DONE = "done"

EVENT_TYPES = frozenset({RUN_STARTED, MODEL_TURN, TOOL_CALL_STARTED, TOOL_RESULT,
                         APPROVAL_REQUESTED, APPROVAL_DECIDED, INFO_REQUESTED, USER_REPLY,
                         REPLY_SHOWN, ERROR, DONE})

# statuses of a run (the task loop's vocabulary)
RUNNING = "running"
WAITING_APPROVAL = "waiting_approval"
WAITING_USER = "waiting_user"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
MAX_TURNS_REACHED = "max_turns_reached"
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, MAX_TURNS_REACHED})


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "at": self.at, "data": self.data}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Event | None:
        kind = record.get("type")
        data = record.get("data")
        if kind not in EVENT_TYPES or not isinstance(data, dict):
            return None
        return cls(kind, data, float(record.get("at", 0.0)))
