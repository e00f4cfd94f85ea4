"""AgentDomain: the agent as the channels see it.

A message starts (or, after a crash, resumes) an event-thread run; a run that waits for an
approval or for the user's answer is continued by a later message or reaction. Both turns
are recorded in the chat's session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from soulflow.agent.approvals import (
    ApproverPolicy,
    Decider,
    Requester,
    refusal_text,
)
from soulflow.agent.budget import cap_of, waiting_on_cap
from soulflow.agent.context import ContextBuilder
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop, RunOutcome, approval_text
from soulflow.agent.run.reducer import RunState
from soulflow.agent.run.showing import AnswerStream
from soulflow.agent.tools.spawn import cancel_orphaned_subruns
from soulflow.backends.base import ApprovalMap, SessionStore
from soulflow.contracts import ApprovalRef, ChatRef, InboundMessage, ReplyStatus

log = logging.getLogger(__name__)

NOT_CONFIGURED_REPLY = (
    "No model provider is configured yet, so I can't answer: set PROVIDER=openrouter with "
    "OPENROUTER_API_KEY, or PROVIDER=phi4_local with PHI4_BASE_URL, in the workspace's .env "
    "and restart (see docs/config.md); or install the embedded model with "
    "pip install 'soulflow[local]' (see docs/local-model.md)."
)

# a run that stopped at its turn limit still posts its best answer, but is counted apart
_STATUS_OF_RUN = {ev.COMPLETED: ReplyStatus.ANSWERED, ev.MAX_TURNS_REACHED: ReplyStatus.MAX_TURNS,
                  ev.WAITING_APPROVAL: ReplyStatus.WAITING_APPROVAL,
                  ev.WAITING_USER: ReplyStatus.WAITING_USER, ev.CANCELLED: ReplyStatus.CANCELLED,
                  ev.FAILED: ReplyStatus.FAILED}


@dataclass(slots=True)
class AgentReply:
    content: str
    status: ReplyStatus
    error: str | None = None
    run_id: str | None = None
    approval_id: str | None = None
    trace: str = ""  # the trace of the run's turn (soulflow/tracing): its reply joins it
    quiet: bool = False  # waits on an approval its chat was already told about: say nothing
    # the platform ids of the pieces of this answer streamed into the chat (in order): the
    # reply edits them (conversation/replies.py) instead of sending new messages
    shown: tuple[str, ...] = ()
    shown_texts: tuple[str, ...] = ()  # what each holds, where known (the stream's last call)

    @property
    def approval(self) -> ApprovalRef | None:
        """The approval this reply asks for, named in the message that carries it so a
        reaction on that message decides it; None unless the run waits for one."""
        if self.approval_id and self.status == ReplyStatus.WAITING_APPROVAL:
            return ApprovalRef(self.run_id or "", self.approval_id)
        return None


def session_key_for(message: InboundMessage) -> str:
    """One session per chat, and per thread where the platform has threads."""
    base = message.chat_key
    return f"{base}:{message.thread_id}" if message.thread_id else base


def _thread_context(message: InboundMessage) -> list[str] | None:
    """The thread's recent messages the channel attached (already sealed), if any."""
    return list(message.thread_context) if message.thread_context is not None else None


def _is_task_run(chat: ChatRef) -> bool:
    """A task step's run (soulflow/tasks/executors.py): the task engine drives it, with the
    step's tool allow-list, and people answer it through the task, not as a chat's run."""
    return bool(chat.task_id)


def _admins_only(state: RunState) -> bool:
    """Whether the run's open approval may be decided by admins (and the local operator) only."""
    return bool((state.open_approval() or {}).get("admins_only"))


def chat_of(message: InboundMessage) -> ChatRef:
    """Where a run answers, and who asked: `requester_id` binds its approvals to that person
    (empty for a cron job's message, which nobody in the chat sent)."""
    requester = "" if message.cron is not None else message.sender_id
    return ChatRef(message.provider, message.chat_id, message.thread_id,
                   sender_id=message.sender_id, sender_name=message.sender_name,
                   requester_id=requester, session_key=session_key_for(message))


class AgentDomain:
    def __init__(self, context: ContextBuilder, sessions: SessionStore,
                 loop: AgentLoop | None, approvals: ApprovalMap | None = None, *,
                 on_turn_finished: Callable[[str, ChatRef], None] | None = None,
                 approvers: ApproverPolicy | None = None,
                 redact: Callable[[str], str] | None = None) -> None:
        self.context = context
        # a reply is the model's text on its way to people: known credentials never go along
        self._redact = redact
        self.approvers = approvers or ApproverPolicy()  # default: no admins, never open
        # e.g. schedule memory consolidation (into the chat's zone: the ChatRef says which)
        self.on_turn_finished = on_turn_finished
        self.sessions = sessions
        self.loop = loop
        self.approvals = approvals
        self._resuming: set[str] = set()  # handed out by resumable_runs(), not yet resumed
        # drives runs decided along with another one and delivers their replies (the
        # conversation's `resume_released`); until wired, they wait for a resume round
        self.release_runs: Callable[[list[str]], None] = self._resuming.difference_update

    @property
    def configured(self) -> bool:
        return self.loop is not None

    async def preload(self, chat_key: str) -> None:
        """Before the chat's turn: read ahead what it will ask of the stores (the chat's
        waiting runs, the decisions its prompt lists), so a store over the network is not
        waited for with the loop held."""
        await self.context.decisions.refresh()
        if self.loop is not None:
            await self.loop.store.preload(chat_key)

    # -- new input -----------------------------------------------------------------------

    async def respond(self, message: InboundMessage, text: str, *,
                      abort: asyncio.Event | None = None,
                      stream: AnswerStream | None = None) -> AgentReply:
        """Answer a message: start its run, or resume the one a crash interrupted. `stream`
        shows the answer while the model writes it."""
        key = session_key_for(message)
        chat = chat_of(message)
        await self.sessions.preload(key, message.chat_key)  # the reads below wait for nothing
        self._record_user_turn(key, message, text)
        if self.loop is None:
            return self._finish_turn(key, chat, message.key,
                                     AgentReply(NOT_CONFIGURED_REPLY, ReplyStatus.ANSWERED))
        existing = await self.loop.store.find_inbound(message.key, message.chat_key)
        run_id = existing[0] if existing else self.loop.begin(
            chat=chat, text=text,
            history=self.context.history(key, text, thread_context=_thread_context(message),
                                         chat=chat),
            inbound_key=message.key)
        return await self._drive(run_id, abort, stream)

    # -- continuing runs -----------------------------------------------------------------

    def open_run(self, chat_key: str, *, by: Decider | None = None) -> tuple[str, str] | None:
        """The chat's run that waits for an approval or an answer, if any: the latest one.

        With `by` (the person writing), the latest approval that person may decide comes
        first: in a group where Alice and Bob each wait for one, Alice's "ok" decides hers
        instead of being refused on Bob's."""
        if self.loop is None:
            return None
        waiting = frozenset({ev.WAITING_APPROVAL, ev.WAITING_USER})
        states = {run_id: self.loop.store.state(run_id)
                  for run_id in self.loop.store.find(chat_key=chat_key, statuses=waiting)}
        runs = [run_id for run_id, state in states.items() if not _is_task_run(state.chat)]
        if not runs:
            return None
        if by is not None:
            for run_id in reversed(runs):
                state = states[run_id]
                if state.status == ev.WAITING_APPROVAL and \
                        self.approvers.may_decide(Requester.of_run(state.chat), by,
                                                  admins_only=_admins_only(state)):
                    return run_id, state.status
        return runs[-1], states[runs[-1]].status

    def pending_approval_text(self, run_id: str) -> str:
        assert self.loop is not None
        state = self.loop.store.state(run_id)
        return approval_text(state.open_approval() or {}, state.chat.provider)

    async def decide(self, run_id: str, decision: str, *, by: Decider,
                     approval_id: str | None = None, abort: asyncio.Event | None = None,
                     stream: AnswerStream | None = None) -> AgentReply | None:
        """Apply an approval decision and continue the run; None if nothing was pending.

        Only the run's requester, an admin or the local operator may decide, and only an admin
        or the local operator an admins-only approval (an approval recorded before that flag
        existed has none): anyone else gets a `refused` reply and the approval stays exactly
        as it was."""
        assert self.loop is not None
        state = self.loop.store.state(run_id)
        approval = state.open_approval()
        if approval is None or (approval_id and approval["approval_id"] != approval_id):
            return None
        requester = Requester.of_run(state.chat)
        admins_only = bool(approval.get("admins_only"))
        if not self.approvers.may_decide(requester, by, admins_only=admins_only):
            log.info("approval %s of %s: %s (%s:%s) may not decide it (requester %s:%s%s)",
                     approval["approval_id"], run_id, by.name or "?", by.provider, by.user_id,
                     requester.provider, requester.user_id or "-",
                     "; admins only" if admins_only else "")
            return AgentReply(refusal_text(requester, admins_only=admins_only,
                                           reason=str(approval.get("reason", ""))),
                              ReplyStatus.REFUSED, run_id=run_id,
                              approval_id=approval["approval_id"])
        self.loop.decide(run_id, approval["approval_id"], decision, by.user_id,
                         by_provider=by.provider)
        if decision == "defer":
            return AgentReply("OK, the request stays pending; decide whenever you are ready.",
                              ReplyStatus.WAITING_APPROVAL, run_id=run_id,
                              approval_id=approval["approval_id"])
        self._decide_same_cap(run_id, approval, decision, by)
        return await self._drive(run_id, abort, stream)

    def _decide_same_cap(self, run_id: str, approval: dict[str, Any], decision: str,
                         by: Decider) -> None:
        """A budget cap's decision is every waiting run's on that cap: they are decided along
        with it (one raise, keyed by this approval) and handed to `release_runs` to go on."""
        assert self.loop is not None
        cap = cap_of(approval)
        if cap is None:
            return
        released = []
        for other, approval_id in waiting_on_cap(self.loop.store, cap):
            if other == run_id:
                continue
            self.loop.decide(other, approval_id, decision, by.user_id, by_provider=by.provider,
                             along_with=str(approval["approval_id"]))
            self._resuming.add(other)  # driven by release_runs, not by a resume round
            released.append(other)
        if released:
            log.info("approval %s (%s) decided %d more run(s) waiting on the same cap",
                     approval["approval_id"], decision, len(released))
            self.release_runs(released)

    async def answer(self, run_id: str, message: InboundMessage, text: str, *,
                     abort: asyncio.Event | None = None,
                     stream: AnswerStream | None = None) -> AgentReply:
        """The user's answer to the run's question."""
        assert self.loop is not None
        self._record_user_turn(session_key_for(message), message, text)
        self.loop.answer(run_id, text)
        return await self._drive(run_id, abort, stream)

    async def resume(self, run_id: str) -> AgentReply:
        """Drive a run that was running when the daemon stopped (or its node died)."""
        try:
            return await self._drive(run_id, None)
        finally:
            self._resuming.discard(run_id)

    async def running_runs(self) -> list[str]:
        """Runs to resume at boot; a task step's run is resumed by the task engine instead."""
        if self.loop is None:
            return []
        return [run_id for run_id in await self.loop.store.find_open(frozenset({ev.RUNNING}))
                if not _is_task_run(self.loop.store.state(run_id).chat)]

    async def resumable_runs(self, owns: Callable[[str], bool] | None = None, *,
                       pending_inbound: Collection[str] = ()) -> list[str]:
        """Runs left `running` that this process should `resume()` now: at boot, and (several
        daemons on Redis) whenever this node comes to hold more chats, with `owns` the
        backend's: only runs of chats it holds, since their node stopped or died.

        Each run is handed out once per process until its `resume()` ends, and never one this
        process is driving already, so calling this on every partition change is safe. Sub-agent
        runs of those chats are cancelled first, as `cancel_orphaned_subruns` does at boot: the
        parent's `spawn` call was interrupted with them. A task step's run is left to the task
        engine, and a run whose inbound message is still pending (`pending_inbound`) to that
        message's turn, which continues it. A background service's run left running (a chat
        `origin`, such as a quiet heartbeat turn) is cancelled instead, as at boot. Driving
        claims the run in the store, so a run is never driven on two nodes."""
        if self.loop is None:
            return []
        loop = self.loop
        await cancel_orphaned_subruns(loop, owns)
        found = []
        for run_id in await loop.store.find_open(frozenset({ev.RUNNING}), chats=owns):
            if run_id in self._resuming or run_id in loop.driving:
                continue
            state = loop.store.state(run_id)
            if _is_task_run(state.chat) or state.inbound_key in pending_inbound:
                continue
            if state.chat.origin:  # a background service's (a quiet heartbeat turn): its
                # answer would come late and out of context; cancelled, as at boot
                loop.cancel(run_id, "its daemon stopped while it ran")
                continue
            self._resuming.add(run_id)
            found.append(run_id)
        return found

    def inbound_key_of(self, run_id: str) -> str | None:
        assert self.loop is not None
        return self.loop.store.state(run_id).inbound_key

    def forget_prompts(self, run_id: str) -> None:
        """A run that ended takes no answer to its approval prompts any more (reactions to
        them are ignored); a run that never asked has nothing to forget."""
        if self.approvals is not None and self.loop is not None and \
                self.loop.store.state(run_id).approvals:
            self.approvals.forget_run(run_id)

    def chat_of_run(self, run_id: str) -> ChatRef:
        assert self.loop is not None
        return self.loop.store.state(run_id).chat

    # -- internals -----------------------------------------------------------------------

    async def _drive(self, run_id: str, abort: asyncio.Event | None,
                     stream: AnswerStream | None = None) -> AgentReply:
        assert self.loop is not None
        # settled below with the turn's session records: one write to the store, not two
        outcome: RunOutcome = await self.loop.drive(run_id, abort, stream=stream, settle=False)
        state = self.loop.store.state(run_id)
        text = self._redact(outcome.text) if self._redact is not None else outcome.text
        reply = AgentReply(text, _STATUS_OF_RUN.get(outcome.status, ReplyStatus.ANSWERED),
                           error=state.error if outcome.status == ev.FAILED else None,
                           run_id=run_id, approval_id=outcome.approval_id,
                           trace=state.traceparent, quiet=outcome.quiet,
                           shown=tuple(state.shown))
        if outcome.status in ev.FINISHED:
            self.forget_prompts(run_id)
        session_key = state.chat.session_key
        if session_key and outcome.status in ev.FINISHED:
            self._finish_turn(session_key, state.chat, state.inbound_key, reply)
            # the run's events and the turn's records are stored before the reply leaves
            await asyncio.gather(self.loop.store.settle(run_id),
                                 self.sessions.settle(session_key))
        else:
            await self.loop.store.settle(run_id)
        return reply

    def _record_user_turn(self, key: str, message: InboundMessage, text: str) -> None:
        """Append the user's turn unless a resumed run already did (crash before the reply)."""
        recent = self.sessions.last(key, 5)
        if any(r.get("inbound_key") == message.key and r.get("role") == "user" for r in recent):
            return
        self.sessions.append(key, {"role": "user", "content": text, "inbound_key": message.key,
                                   "sender_id": message.sender_id})

    def _finish_turn(self, key: str, chat: ChatRef, inbound_key: str | None,
                     reply: AgentReply) -> AgentReply:
        record: dict[str, Any] = {"role": "assistant", "content": reply.content,
                                  "inbound_key": inbound_key, "status": reply.status}
        if reply.run_id:
            record["run_id"] = reply.run_id
        if reply.error:
            record["error"] = reply.error
        self.sessions.append(key, record)
        if self.on_turn_finished is not None:
            try:
                self.on_turn_finished(key, chat)
            except Exception:  # a background helper must never break a reply
                log.exception("on_turn_finished failed for %s", key)
        return reply
