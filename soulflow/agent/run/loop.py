"""The orchestrator: persist each event, then act on the state it produces.

`drive()` repeats one step until the run finishes or has to wait (for an approval or for the
user): call the model, or run the next tool call of the last model turn. Every step appends
its event before the next one reads the state, so after a crash `drive()` picks up at the
exact step it was in. A tool call that was started but has no result was interrupted: it is
re-run only if the tool is idempotent, otherwise the model is told it was interrupted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow import tracing
from soulflow.agent.approvals import admins_only_text
from soulflow.agent.budget import BUDGET_TOOL, Budgets, waiting_on_cap
from soulflow.agent.run import events as ev
from soulflow.agent.run.reducer import RunState
from soulflow.agent.run.showing import AnswerStream, ShownLeg, StreamFeed
from soulflow.agent.toolcall_text import parse_text_tool_calls
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.usage import UsageMeter
from soulflow.backends.base import RunJournal, RunMoved
from soulflow.contracts import ChatRef, Provider, ProviderError
from soulflow.logs import log_context

log = logging.getLogger(__name__)

REQUEST_INFO = "request_more_information"
DONE_FOR_NOW = "done_for_now"
INTERRUPTED = ("Error: interrupted. The daemon stopped while this tool was running, and it "
               "was not run again because it may have side effects. Check its effect before "
               "retrying.")

INTENT_SCHEMAS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": REQUEST_INFO,
        "description": "Ask the user a question and wait for the answer before continuing.",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}},
                       "required": ["question"]}}},
    {"type": "function", "function": {
        "name": DONE_FOR_NOW,
        "description": "Finish the task with a final answer to the user.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                       "required": ["answer"]}}},
]


@dataclass(slots=True)
class RunOutcome:
    """Where a run stands after `drive()`, and what to tell the user now."""

    run_id: str
    status: str
    text: str
    approval_id: str | None = None
    quiet: bool = False  # waits on an approval its chat was already told about


ContextFactory = Callable[[RunState, bool], ToolContext]
SystemPrompt = Callable[[ChatRef], str]
"""The system prompt of a run of this chat (global context plus the chat zone's memory)."""


def _arguments(call: dict[str, Any]) -> dict[str, Any] | str:
    raw = call.get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        return raw if isinstance(raw, str) else ""
    return parsed if isinstance(parsed, dict) else ""


class AgentLoop:
    def __init__(self, store: RunJournal, provider: Callable[[], Provider], tools: ToolRegistry,
                 system_prompt: SystemPrompt, tool_context: ContextFactory, *,
                 max_turns: int = 10, usage: UsageMeter | None = None,
                 budgets: Budgets | None = None) -> None:
        self.store = store
        self.usage = usage  # counts every model call for the run's chat, requester and source
        self.budgets = budgets  # daily caps checked before each model call
        self._provider = provider
        self.tools = tools
        self._system_prompt = system_prompt
        self._tool_context = tool_context
        self.max_turns = max_turns
        # runs a drive() of this process is advancing now → their chat (`provider:chat_id`)
        self.driving: dict[str, str] = {}

    # -- entry points --------------------------------------------------------------------

    def begin(self, *, chat: ChatRef, text: str, history: list[dict[str, Any]],
              inbound_key: str | None = None, parent_run: str | None = None,
              max_turns: int | None = None) -> str:
        """Record a new run (nothing runs yet); returns its id."""
        run_id = f"run_{uuid.uuid4().hex[:16]}"
        self.store.append(run_id, ev.Event(ev.RUN_STARTED, {
            "run_id": run_id, "chat": chat.to_dict(), "text": text, "history": history,
            "inbound_key": inbound_key, "parent_run": parent_run,
            "max_turns": max_turns or self.max_turns,
            **_trace_of_turn()}))
        return run_id

    def decide(self, run_id: str, approval_id: str, decision: str, by: str = "",
               by_provider: str = "", *, along_with: str = "") -> None:
        """Record a decision (who may decide is checked by the caller, AgentDomain);
        `along_with`: the approval whose decision this one follows (a budget cap's)."""
        data = {"approval_id": approval_id, "decision": decision, "by": by,
                "by_provider": by_provider}
        if along_with:
            data["with"] = along_with
        self.store.append(run_id, ev.Event(ev.APPROVAL_DECIDED, data))

    def answer(self, run_id: str, text: str) -> None:
        """The user's reply to a `request_more_information` question."""
        self.store.append(run_id, ev.Event(ev.USER_REPLY, {"text": text}))

    def cancel(self, run_id: str, reason: str = "cancelled by the user") -> RunOutcome:
        state = self.store.state(run_id)
        if not state.finished:
            state = self._finish(run_id, ev.CANCELLED, f"Cancelled: {reason}.")
        return self._outcome(state)

    async def drive(self, run_id: str, abort: asyncio.Event | None = None, *,
                    stream: AnswerStream | None = None, settle: bool = True) -> RunOutcome:
        """Advance the run until it finishes or must wait; its log lines carry the run id and
        the chat (soulflow/logs.py). The run is claimed first: with several daemons, a run
        another node took over (it now holds the chat) raises `RunMoved` instead. `stream`
        shows the model's text as it is written (conversation/streaming.py). Without `settle`
        the caller must `store.settle(run_id)` before the outcome leaves the run."""
        if not self.store.claim(run_id):
            raise RunMoved(f"run {run_id} is driven by the node that now holds its chat")
        state = self.store.state(run_id)
        chat = state.chat
        if stream is not None:
            stream.begin(ShownLeg(run_id, state.leg, tuple(state.shown),
                                  lambda index, platform_id: self._shown(
                                      run_id, index, platform_id)))
        self.driving[run_id] = chat.key
        try:
            with log_context(run_id=run_id, chat=chat.key if chat.provider else None), \
                    _run_span(state):
                outcome = await self._drive(run_id, abort, stream)
                # the step's events are stored before its outcome leaves the run (a reply,
                # a prompt): a crash after this point never runs the step again. A caller
                # with writes of its own to add passes `settle=False` and settles both.
                if settle:
                    await self.store.settle(run_id)
                return outcome
        finally:
            self.driving.pop(run_id, None)

    def _shown(self, run_id: str, index: int, platform_id: str) -> None:
        self.store.append(run_id, ev.Event(ev.REPLY_SHOWN, {"index": index,
                                                            "platform_id": platform_id}))

    async def _drive(self, run_id: str, abort: asyncio.Event | None,
                     stream: AnswerStream | None = None) -> RunOutcome:
        state = self.store.state(run_id)
        for _ in range(4 * (state.max_turns + 2) * 8):  # bounded, whatever a model does
            if state.status != ev.RUNNING:
                return self._outcome(state)
            if abort is not None and abort.is_set():
                state = self._finish(run_id, ev.CANCELLED, "Stopped.")
            elif state.started_calls:
                state = await self._recover_interrupted(run_id, state)
            elif state.pending_calls:
                state = await self._run_call(run_id, state, state.pending_calls[0], abort)
            elif state.turns >= state.max_turns:
                last = next((m["content"] for m in reversed(state.conversation)
                             if m["role"] == "assistant" and m.get("content")), "")
                note = f"I stopped after {state.max_turns} steps without finishing."
                state = self._finish(run_id, ev.MAX_TURNS_REACHED,
                                     f"{note}\n\n{last}".strip())
            else:
                state = await self._model_turn(run_id, state, abort, stream)
        return self._outcome(self._finish(run_id, ev.FAILED, "The run made no progress."))

    # -- steps ---------------------------------------------------------------------------

    def _budget_gate(self, run_id: str, state: RunState) -> RunState | None:
        """Before a model call: apply the budget raises admins approved in this run, end it
        if one was denied, and at a reached cap pause it as an admins-only approval (a cron
        or heartbeat run is skipped instead). None: go on with the call."""
        budgets = self.budgets
        if budgets is None or not budgets.active:
            return None
        for approval in state.approvals.values():
            if approval.get("tool") != BUDGET_TOOL:
                continue
            decision, arguments = approval.get("decision"), approval.get("arguments") or {}
            if decision == "approve":  # idempotent: keyed by the approval (the first one,
                # for the runs that waited on the same cap and were approved along with it)
                budgets.approve(str(arguments.get("scope")), str(arguments.get("key", "")),
                                str(approval.get("with") or approval["approval_id"]),
                                spent=float(arguments.get("spent") or 0.0),
                                cap=float(arguments.get("cap") or 0.0))
            elif decision in ("deny", "cancel"):
                return self._finish(run_id, ev.CANCELLED, "Not answered: today's model "
                                    "budget is reached and was not raised.")
        hit = budgets.reached(state.chat)
        if hit is None:
            return None
        if budgets.skips(state.chat):
            return self._finish(run_id, ev.CANCELLED, budgets.skipped(state.chat, hit))
        approval_id = f"ap_{uuid.uuid4().hex[:8]}"
        log.warning("run %s paused: %s", run_id, hit.text())
        # the chat is told once: a run that finds its chat already waiting on this cap waits
        # too, quietly, and is decided along with that approval (AgentDomain.decide)
        quiet = bool(waiting_on_cap(self.store, hit.raise_key, chat_key=state.chat.key))
        return self.store.append(run_id, ev.Event(ev.APPROVAL_REQUESTED, {
            "approval_id": approval_id, "call_id": f"budget.{approval_id}",
            "tool": BUDGET_TOOL, "reason": hit.text(), "admins_only": True, "quiet": quiet,
            "arguments": {"scope": str(hit.scope), "key": hit.key,
                          "spent": round(hit.spent, 6), "cap": round(hit.cap, 6)}}))

    async def _model_turn(self, run_id: str, state: RunState, abort: asyncio.Event | None,
                          stream: AnswerStream | None = None) -> RunState:
        if self.budgets is not None:
            await self.budgets.refresh()
        gated = self._budget_gate(run_id, state)
        if gated is not None:
            return gated
        messages = [{"role": "system", "content": self._system_prompt(state.chat)},
                    *state.conversation]
        schemas = self.tools.schemas() + INTENT_SCHEMAS
        provider = self._provider()
        feed = StreamFeed(stream) if stream is not None else None
        try:
            with log_context(provider=getattr(provider, "name", None)):
                result = await provider.chat(messages, schemas, on_stream=feed, abort=abort)
        except ProviderError as exc:
            if exc.kind == "aborted":
                return self._finish(run_id, ev.CANCELLED, "Stopped.")
            self.store.append(run_id, ev.Event(ev.ERROR, {"message": str(exc), "kind": exc.kind}))
            return self._finish(run_id, ev.FAILED,
                                f"Sorry, I couldn't get an answer from the model ({exc.kind}).")
        if feed is not None:
            feed.close()
        if self.usage is not None:
            self.usage.record(result, state.chat)
        found, content = list(result.tool_calls), result.content
        if not found and content:
            known = set(self.tools.names()) | {REQUEST_INFO, DONE_FOR_NOW}
            parsed = parse_text_tool_calls(content, known)
            if parsed.calls:
                found, content = parsed.calls, parsed.remaining_text
        # ids are made unique per run: some servers restart at "call_0" every turn, and an
        # approval given for one turn's call must never apply to a later one
        turn = state.turns + 1
        calls = [{"id": f"t{turn}.{c.id or f'call_{index}'}", "name": c.name,
                  "arguments": c.arguments} for index, c in enumerate(found)]
        state = self.store.append(run_id, ev.Event(ev.MODEL_TURN, {
            "content": content, "tool_calls": calls, "provider": result.provider}))
        if not calls:
            return self._finish(run_id, ev.COMPLETED,
                                content.strip() or "(the model returned an empty answer)")
        return state

    async def _run_call(self, run_id: str, state: RunState, call: dict[str, Any],
                        abort: asyncio.Event | None) -> RunState:
        name, call_id = call["name"], call["id"]
        arguments = _arguments(call)
        if name == DONE_FOR_NOW:
            answer = arguments.get("answer", "") if isinstance(arguments, dict) else ""
            self._result(run_id, call_id, name, "ok", "done")
            return self._finish(run_id, ev.COMPLETED, str(answer) or "Done.")
        if name == REQUEST_INFO:
            question = arguments.get("question", "") if isinstance(arguments, dict) else ""
            return self.store.append(run_id, ev.Event(ev.INFO_REQUESTED, {
                "call_id": call_id, "question": str(question) or "Could you tell me more?"}))
        asker = self.tools.get(name)
        if asker is not None and getattr(asker, "asks_user", False):
            # e.g. request_file: the run waits like request_more_information, and the user's
            # next message (attachments saved, as `[attachment NAME saved at PATH]`) answers it
            question = asker.question(arguments if isinstance(arguments, dict) else {})
            return self.store.append(run_id, ev.Event(ev.INFO_REQUESTED, {
                "call_id": call_id, "question": question}))
        decision = state.decision_for(call_id)
        if decision in ("deny", "cancel"):
            if decision == "cancel":
                self._result(run_id, call_id, name, "error", "Cancelled by the user.")
                return self._finish(run_id, ev.CANCELLED, "Cancelled.")
            return self._result(run_id, call_id, name, "error",
                                "Error: the user denied this tool call.")
        self.store.append(run_id, ev.Event(ev.TOOL_CALL_STARTED, {"id": call_id, "name": name}))
        await self.store.settle(run_id)  # stored before the tool acts: a crash is seen as one
        context = self._tool_context(state, decision == "approve")
        context.abort = abort
        result = await self.tools.execute(name, arguments, context)
        if result.status == "approval_required":
            approval_id = f"ap_{uuid.uuid4().hex[:8]}"
            # `admins_only` travels with the request: whoever decides it later (a reply, a
            # reaction, the dashboard, a task step's answer) is checked against it
            return self.store.append(run_id, ev.Event(ev.APPROVAL_REQUESTED, {
                "approval_id": approval_id, "call_id": call_id, "tool": name,
                "arguments": arguments, "reason": result.reason or "this call is risky",
                "admins_only": result.admins_only}))
        return self._result(run_id, call_id, name, result.status, result.output)

    async def _recover_interrupted(self, run_id: str, state: RunState) -> RunState:
        call_id = next(iter(state.started_calls))
        call = next((c for c in state.pending_calls if c["id"] == call_id), None)
        tool = self.tools.get(call["name"]) if call is not None else None
        if call is not None and tool is not None and tool.idempotent:
            log.info("re-running idempotent tool %s of %s after a restart", call["name"], run_id)
            return await self._run_call(run_id, state, call, None)
        name = call["name"] if call is not None else "?"
        log.warning("tool %s of %s was interrupted; reporting it to the model", name, run_id)
        return self._result(run_id, call_id, name, "error", INTERRUPTED)

    # -- helpers -------------------------------------------------------------------------

    def _result(self, run_id: str, call_id: str, name: str, status: str,
                output: str) -> RunState:
        return self.store.append(run_id, ev.Event(ev.TOOL_RESULT, {
            "id": call_id, "name": name, "status": status, "output": output}))

    def _finish(self, run_id: str, status: str, final: str) -> RunState:
        return self.store.append(run_id, ev.Event(ev.DONE, {"status": status, "final": final}))

    def _outcome(self, state: RunState) -> RunOutcome:
        if state.status == ev.WAITING_APPROVAL:
            approval = state.open_approval() or {}
            text = approval_text(approval, state.chat.provider)
            return RunOutcome(state.run_id, state.status, text, approval.get("approval_id"),
                              quiet=bool(approval.get("quiet")))
        if state.status == ev.WAITING_USER:
            return RunOutcome(state.run_id, state.status, state.question or "")
        return RunOutcome(state.run_id, state.status, state.final or "")


# Telegram offers a fixed set of reactions that has none of the default symbols
REACTION_HINTS = {"telegram": "👍 👎 🤔"}  # approve, deny, explain
DEFAULT_REACTION_HINT = "✅ ❌ ⏸ 🚫"


def approval_text(approval: dict[str, Any], provider: str = "") -> str:
    """The chat message announcing an approval request (no secret values: the arguments are
    the model's, with `{{secret:…}}` references still unresolved). An admins-only one says
    so, so the requester knows to ask an admin rather than answer herself."""
    arguments = json.dumps(approval.get("arguments", {}), ensure_ascii=False)
    if len(arguments) > 600:
        arguments = arguments[:600] + "…"
    reason = str(approval.get("reason", ""))
    if approval.get("tool") == BUDGET_TOOL:
        return (f"Approval needed [{approval.get('approval_id', '?')}]: {reason}. Only an "
                "admin can approve going over it (the cap rises for today).\n"
                "Reply approve / deny (or 승인 / 거부), or react "
                f"{REACTION_HINTS.get(provider, DEFAULT_REACTION_HINT)}.")
    why = admins_only_text(reason) if approval.get("admins_only") else f"Reason: {reason}."
    return (f"Approval needed [{approval.get('approval_id', '?')}]: I want to run "
            f"`{approval.get('tool', '?')}` with {arguments}\n"
            f"{why}\n"
            "Reply approve / deny / defer / cancel (or 승인 / 거부 / 보류 / 취소), or react "
            f"{REACTION_HINTS.get(provider, DEFAULT_REACTION_HINT)}.")


def _trace_of_turn() -> dict[str, str]:
    """The run's first event keeps the trace of the turn that began it, so a run resumed
    after a restart or by another node continues that trace ({} when tracing is off)."""
    trace = tracing.traceparent()
    return {"traceparent": trace} if trace else {}


def _run_span(state: RunState) -> tracing.SpanScope:
    """One span per drive of a run: under the turn's span when a turn drives it, else (a
    resumed run) continuing the trace its first event recorded."""
    if not tracing.active():
        return tracing.OFF
    return tracing.span("invoke_agent soulflow", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "soulflow",
        "soulflow.run.resumed": bool(state.turns or state.approvals)},
        parent="" if tracing.traceparent() else state.traceparent)
