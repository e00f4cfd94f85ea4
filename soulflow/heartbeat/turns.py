"""Agent turns nobody typed: the heartbeat and `system_event` cron jobs.

Such a turn runs in a session of its own (`heartbeat`, `cron:<job id>`), so hundreds of
periodic checks never crowd a person's chat history, and that session stays bounded: the
model sees only its last few turns (`history_messages`) and older turns are folded into
memory by the consolidator. The run belongs to the target chat (approvals are asked there,
and only an admin may decide them: nobody in the chat requested the run), but its answer is
sent there only when it is not the all-clear token (`HEARTBEAT_OK`).

A turn is keyed (`turn_key`): firing the same occurrence twice (a crash before the cron
store advanced) resumes or skips it instead of asking the model again. A turn interrupted by
a stop is cancelled at the next boot (`cancel_interrupted`) rather than resumed and answered
late, since the next occurrence checks again anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from soulflow.agent.consolidate import Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.run import events as ev
from soulflow.contracts import QUIET_TURN_ORIGIN, Announcement, ApprovalRef, ChatRef
from soulflow.heartbeat.checklist import is_ok_reply
from soulflow.security.zones import zone_for
from soulflow.supervisor import cancel_and_wait

__all__ = ["ORIGIN", "Publish", "QuietTurn", "QuietTurnRunner", "TurnOutcome", "TurnStatus"]

log = logging.getLogger(__name__)

ORIGIN = QUIET_TURN_ORIGIN  # marks these runs' chat records (recovery, the ops watchdog)
INTERRUPTED_REASON = "interrupted by a restart; the next occurrence checks again"

Publish = Callable[[ChatRef, str, Announcement | None], None]
"""Queue a message to a chat: (chat, text, the approval it asks for)."""


class TurnStatus(StrEnum):
    OK = "ok"  # the all-clear: nothing sent
    NOTIFIED = "notified"  # the answer was sent to the chat
    WAITING = "waiting"  # the run waits for an approval or an answer (asked in the chat)
    FAILED = "failed"  # the run failed or was cancelled (logged, not sent)
    DUPLICATE = "duplicate"  # this occurrence already ran
    BUSY = "busy"  # an earlier turn of this session still waits; not started
    NO_MODEL = "no_model"


@dataclass(frozen=True, slots=True)
class QuietTurn:
    session_key: str
    target: ChatRef
    text: str
    turn_key: str  # unique per occurrence: `heartbeat-<ts>`, `cron-<job>-<ts>`
    label: str  # who "sent" it, for logs and the session: "heartbeat", "cron: name"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    status: TurnStatus
    text: str = ""
    run_id: str | None = None


class QuietTurnRunner:
    """Runs `QuietTurn`s through the agent loop; one at a time per session."""

    def __init__(self, agent: AgentDomain, context: ContextBuilder, publish: Publish, *,
                 consolidator: Consolidator | None = None,
                 redact: Callable[[str], str] | None = None) -> None:
        self._agent = agent
        self._context = context  # a builder with the short history of these sessions
        self._publish = publish
        self._consolidator = consolidator
        self._redact = redact or (lambda text: text)
        self._aborts: dict[str, asyncio.Event] = {}  # run id -> its abort, while driven
        self._tasks: dict[str, asyncio.Task[TurnOutcome]] = {}  # session -> background turn
        self.outcomes: dict[str, TurnOutcome] = {}  # session key -> its last outcome

    # -- in the background (cron's system_event jobs) -------------------------------------

    def submit(self, turn: QuietTurn) -> bool:
        """Run a turn in the background (the scheduler must not wait minutes for a model);
        False when the session's previous turn is still running (this occurrence is skipped)."""
        if turn.session_key in self._tasks:
            log.info("%s: the previous occurrence still runs; skipping this one", turn.label)
            return False
        task = asyncio.get_running_loop().create_task(self._run_logged(turn),
                                                      name=f"quiet:{turn.session_key}")
        self._tasks[turn.session_key] = task
        task.add_done_callback(lambda _t, key=turn.session_key: self._tasks.pop(key, None))
        return True

    async def _run_logged(self, turn: QuietTurn) -> TurnOutcome:
        try:
            outcome = await self.run(turn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a background turn has nobody to raise to
            log.exception("%s failed", turn.label)
            outcome = TurnOutcome(TurnStatus.FAILED, f"{type(exc).__name__}: {exc}")
        self.outcomes[turn.session_key] = outcome
        return outcome

    async def stop(self) -> None:
        """Cancel background turns (the next boot cancels their runs: `cancel_interrupted`)."""
        await cancel_and_wait(self._tasks.values())

    # -- running -------------------------------------------------------------------------

    async def run(self, turn: QuietTurn) -> TurnOutcome:
        """Run one turn to its end (or its wait) and send the answer if it says something."""
        loop = self._agent.loop
        if loop is None:
            return TurnOutcome(TurnStatus.NO_MODEL, "no model provider is configured")
        chat = self._chat(turn)  # a quiet zone of its own (zone_for), not the target's
        # what the turn reads, read ahead (as a chat's turn does): its session's tail and the
        # chat's open runs, so a store over the network is not waited for with the loop held
        await self._agent.sessions.preload(turn.session_key, chat.key)
        await self._agent.preload(chat.key)
        existing = await loop.store.find_inbound(turn.turn_key, chat.key)
        if existing:
            run_id = existing[0]
            if loop.store.state(run_id).status != ev.RUNNING:
                return TurnOutcome(TurnStatus.DUPLICATE, run_id=run_id)
        elif self._already_answered(turn):
            return TurnOutcome(TurnStatus.DUPLICATE)
        elif (waiting := await self.waiting_run(turn.session_key, chat.key)) is not None:
            return TurnOutcome(TurnStatus.BUSY, run_id=waiting)
        else:
            self._agent.sessions.append(turn.session_key, {
                "role": "user", "content": turn.text, "inbound_key": turn.turn_key,
                "sender_id": turn.label})
            run_id = loop.begin(chat=chat, text=turn.text,
                                history=self._context.history(turn.session_key, turn.text,
                                                              chat=chat),
                                inbound_key=turn.turn_key)
        abort = self._aborts[run_id] = asyncio.Event()
        try:
            outcome = await loop.drive(run_id, abort)
        finally:
            self._aborts.pop(run_id, None)
        text = self._redact(outcome.text)
        if outcome.status in (ev.WAITING_APPROVAL, ev.WAITING_USER):
            approval = ApprovalRef(run_id, outcome.approval_id) if outcome.approval_id else None
            self._publish(turn.target, f"[{turn.label}] {text}", approval)
            return TurnOutcome(TurnStatus.WAITING, text, run_id)
        self._record_answer(turn, run_id, outcome.status, text)
        if outcome.status in (ev.FAILED, ev.CANCELLED):
            log.warning("%s did not finish (%s): %s", turn.label, outcome.status, text[:200])
            return TurnOutcome(TurnStatus.FAILED, text, run_id)
        if is_ok_reply(text):
            log.info("%s: all clear", turn.label)
            return TurnOutcome(TurnStatus.OK, text, run_id)
        self._publish(turn.target, f"[{turn.label}] {text}", None)
        return TurnOutcome(TurnStatus.NOTIFIED, text, run_id)

    def abort(self, run_id: str) -> bool:
        """Ask a turn being driven to stop (the ops watchdog); False if none drives it."""
        event = self._aborts.get(run_id)
        if event is None:
            return False
        event.set()
        return True

    async def waiting_run(self, session_key: str, chat_key: str) -> str | None:
        """A run of this session (whose runs are `chat_key`'s, the target chat's) that waits
        for an approval or an answer, if any."""
        loop = self._agent.loop
        if loop is None:
            return None
        waiting = frozenset({ev.WAITING_APPROVAL, ev.WAITING_USER})
        for run_id in await loop.store.find_open(waiting, chats=chat_key.__eq__):
            if loop.store.state(run_id).chat.session_key == session_key:
                return run_id
        return None

    async def cancel_interrupted(self, owns: Callable[[str], bool] | None = None) -> int:
        """At boot, before unfinished runs are resumed: cancel quiet turns a stop cut off.
        With `owns` (several daemons on shared run journals): only those of chats this node
        holds, which no other node can be driving."""
        loop = self._agent.loop
        if loop is None:
            return 0
        cancelled = 0
        for run_id in await loop.store.find_open(frozenset({ev.RUNNING}), chats=owns):
            chat = loop.store.state(run_id).chat
            if chat.origin == ORIGIN:
                loop.cancel(run_id, INTERRUPTED_REASON)
                cancelled += 1
        return cancelled

    # -- internals -----------------------------------------------------------------------

    @staticmethod
    def _chat(turn: QuietTurn) -> ChatRef:
        # requester_id empty: nobody in the chat asked, so only an admin decides approvals
        target = turn.target
        return ChatRef(target.provider, target.chat_id, target.thread_id, sender_id=turn.label,
                       sender_name=turn.label, requester_id="", session_key=turn.session_key,
                       origin=ORIGIN)

    def _already_answered(self, turn: QuietTurn) -> bool:
        recent = self._agent.sessions.last(turn.session_key, 6)
        return any(r.get("inbound_key") == turn.turn_key and r.get("role") == "assistant"
                   for r in recent)

    def _record_answer(self, turn: QuietTurn, run_id: str, status: str, text: str) -> None:
        self._agent.sessions.append(turn.session_key, {
            "role": "assistant", "content": text, "inbound_key": turn.turn_key,
            "status": status, "run_id": run_id})
        self._agent.forget_prompts(run_id)
        if self._consolidator is not None:
            self._consolidator.schedule(turn.session_key, zone_for(self._chat(turn)))
