"""Fold a run's events into its state. Pure: no I/O, no clock, same events → same state."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import soulflow.agent.run.events as ev
from soulflow.contracts import ChatRef


@dataclass
class RunState:
    run_id: str = ""
    status: str = ev.RUNNING
    chat: ChatRef = field(default_factory=lambda: ChatRef("", ""))
    inbound_key: str | None = None
    max_turns: int = 10
    conversation: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    pending_calls: list[dict[str, Any]] = field(default_factory=list)
    started_calls: set[str] = field(default_factory=set)
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    question: str | None = None
    question_call_id: str | None = None
    final: str | None = None
    error: str | None = None
    parent_run: str | None = None
    traceparent: str = ""  # the trace of the turn that began it (soulflow/tracing)
    # the streamed answer of this leg (since the run began or last took a decision or an
    # answer): the platform id of each piece shown in the chat, and the leg's number
    shown: list[str] = field(default_factory=list)
    leg: int = 0

    @property
    def finished(self) -> bool:
        return self.status in ev.FINISHED

    def decision_for(self, call_id: str) -> str | None:
        for approval in self.approvals.values():
            if approval["call_id"] == call_id and approval.get("decision"):
                return str(approval["decision"])
        return None

    def open_approval(self) -> dict[str, Any] | None:
        for approval in self.approvals.values():
            if approval.get("decision") in (None, "defer"):
                return approval
        return None


def _assistant_message(data: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": data.get("content") or ""}
    calls = data.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [{
            "id": call["id"], "type": "function",
            "function": {"name": call["name"],
                         "arguments": call["arguments"] if isinstance(call["arguments"], str)
                         else json.dumps(call["arguments"], ensure_ascii=False)},
        } for call in calls]
    return message


def _drop_call(state: RunState, call_id: str) -> None:
    state.pending_calls = [c for c in state.pending_calls if c["id"] != call_id]
    state.started_calls.discard(call_id)


def _next_leg(state: RunState) -> None:
    """A decision or an answer starts a new leg: its answer is a new message, not an edit of
    the one the last leg streamed (that one holds the question it asked)."""
    state.shown = []
    state.leg += 1


def apply(state: RunState, event: ev.Event) -> RunState:
    """The state after `event` (a new object; `state` is not modified)."""
    new = copy.deepcopy(state)
    apply_in_place(new, event)
    return new


def apply_in_place(new: RunState, event: ev.Event) -> None:
    """Fold one event into `new`, mutating it (for callers that own the state object)."""
    data = event.data
    if event.type == ev.RUN_STARTED:
        new.run_id = data["run_id"]
        new.chat = ChatRef.from_dict(data.get("chat"))
        new.inbound_key = data.get("inbound_key")
        new.max_turns = int(data.get("max_turns", 10))
        new.conversation = list(data.get("history", [])) + [
            {"role": "user", "content": data.get("text", "")}]
        new.parent_run = data.get("parent_run")
        new.traceparent = str(data.get("traceparent") or "")
    elif event.type == ev.MODEL_TURN:
        new.conversation.append(_assistant_message(data))
        new.pending_calls = [dict(c) for c in data.get("tool_calls") or []]
        new.turns += 1
    elif event.type == ev.TOOL_CALL_STARTED:
        new.started_calls.add(data["id"])
    elif event.type == ev.TOOL_RESULT:
        new.conversation.append({"role": "tool", "tool_call_id": data["id"],
                                 "content": data.get("output", "")})
        _drop_call(new, data["id"])
    elif event.type == ev.APPROVAL_REQUESTED:
        new.started_calls.discard(data["call_id"])
        # an approval recorded before `admins_only` existed is an ordinary one, as it was
        new.approvals[data["approval_id"]] = {**data, "decision": None,
                                              "admins_only": bool(data.get("admins_only"))}
        new.status = ev.WAITING_APPROVAL
    elif event.type == ev.APPROVAL_DECIDED:
        approval = new.approvals.get(data["approval_id"])
        if approval is not None:
            approval["decision"] = data["decision"]
            approval["by"] = data.get("by", "")
            approval["by_provider"] = data.get("by_provider", "")
            if data.get("with"):  # decided along with another approval (budget.py)
                approval["with"] = data["with"]
            if data["decision"] != "defer":
                new.status = ev.RUNNING
                _next_leg(new)
    elif event.type == ev.INFO_REQUESTED:
        new.question = data.get("question", "")
        new.question_call_id = data.get("call_id")
        new.status = ev.WAITING_USER
    elif event.type == ev.USER_REPLY:
        if new.question_call_id:
            new.conversation.append({"role": "tool", "tool_call_id": new.question_call_id,
                                     "content": f"The user answered: {data.get('text', '')}"})
            _drop_call(new, new.question_call_id)
        else:
            new.conversation.append({"role": "user", "content": data.get("text", "")})
        new.question = new.question_call_id = None
        new.status = ev.RUNNING
        _next_leg(new)
    elif event.type == ev.REPLY_SHOWN:
        index, platform_id = int(data.get("index", 0)), str(data.get("platform_id", ""))
        if 0 <= index <= len(new.shown) and platform_id:
            new.shown[index:index + 1] = [platform_id]
    elif event.type == ev.ERROR:
        new.error = data.get("message", "")
    elif event.type == ev.DONE:
        new.status = data.get("status", ev.COMPLETED)
        new.final = data.get("final")


def fold(events: Iterable[ev.Event]) -> RunState:
    """Replay events from the start (mutating one private state: linear, not quadratic)."""
    state = RunState()
    for event in events:
        apply_in_place(state, event)
    return state
