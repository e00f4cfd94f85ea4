"""The ``spawn`` tool: hand one self-contained task to a sub-agent and get its result back.

A sub-agent is an ordinary run of the same `AgentLoop` (same tools, same journal, so it
survives in the thread store for inspection) started with ``parent_run`` set. Two rules keep
it safe, and both live in the runtime, not in the model's hands:

* **Nobody can answer inside a sub-run.** It has no chat turn of its own, so when it would
  wait for an approval or ask the user a question, `run_subagent` cancels it and returns a
  failure that tells the parent how to proceed (do that step itself, where the user is asked).
* **No recursion.** The runtime gives sub-runs' tool contexts no ``spawn`` service (their
  `RunState.parent_run` is set), so a sub-agent calling ``spawn`` gets a clear error.

The parent's abort and the tool's timeout cancel the call, and `run_subagent` then cancels
the sub-run, so no half-finished sub-run is ever left running; after a daemon crash,
`cancel_orphaned_subruns` closes the ones that were (their parent call is reported as
interrupted and the model decides what to do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.contracts import QUIET_TURN_ORIGIN, ChatRef

__all__ = [
    "DEFAULT_MAX_TURNS",
    "MAX_TURNS",
    "SpawnTool",
    "cancel_orphaned_subruns",
    "run_subagent",
]

DEFAULT_MAX_TURNS = 5
MAX_TURNS = 20
_SECONDS_PER_TURN = 90  # a model call plus a tool call; the whole sub-run is one tool call

SUBAGENT_BRIEF = (
    "You are a sub-agent: another agent run gave you the task below. Nobody can answer "
    "questions or approve tool calls while you work, so use only tools that need no "
    "approval, and finish with done_for_now giving the complete result (the other agent "
    "sees only that).\n\nTask:\n"
)
_STATUS_LABELS = {
    ev.COMPLETED: "completed",
    ev.MAX_TURNS_REACHED: "stopped at its turn limit",
    ev.FAILED: "failed",
    ev.CANCELLED: "cancelled",
}


class SpawnTool(Tool):
    name = "spawn"
    description = (
        "Run a sub-agent on a self-contained task and get its final answer. It has your tools "
        "but cannot ask the user anything or get approvals, so give it everything it needs in "
        f"`task`. max_turns (1-{MAX_TURNS}, default {DEFAULT_MAX_TURNS}) bounds its steps."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS,
                          "default": DEFAULT_MAX_TURNS},
        },
        "required": ["task"],
        "additionalProperties": False,
    }
    idempotent = False  # the sub-agent may have side effects

    def timeout_for(self, params: Params) -> float:
        return 60 + _SECONDS_PER_TURN * int(params.get("max_turns", DEFAULT_MAX_TURNS))

    async def run(self, params: Params, ctx: ToolContext) -> str:
        spawn = ctx.services.spawn
        if spawn is None:
            raise ToolError("spawn is not available here (a sub-agent cannot start another "
                            "sub-agent); do the task yourself")
        result = await spawn(params["task"], int(params.get("max_turns", DEFAULT_MAX_TURNS)))
        return str(result)


async def run_subagent(loop: AgentLoop, *, parent_chat: ChatRef, task: str,
                       max_turns: int, parent_run: str) -> str:
    """Run ``task`` as a sub-run of ``parent_run`` to its end; the text for the parent model.

    Called only by the runtime's ``spawn`` service. The sub-run gets the parent's chat (so
    its tools act for the same chat) but no history and no session: its turns never appear
    in the chat's conversation, only its result does, through the parent.
    """
    # the place and the sender only (no session: its turns stay out of the conversation);
    # its approvals belong to the parent's sender, as they always have. A quiet turn's
    # sub-run keeps the turn's origin and session, which name its chat zone (zone_for): a
    # heartbeat's sub-agent works in the heartbeat's zone, never in its target chat's
    quiet = parent_chat.origin == QUIET_TURN_ORIGIN
    chat = ChatRef(parent_chat.provider, parent_chat.chat_id, parent_chat.thread_id,
                   sender_id=parent_chat.sender_id, requester_id=parent_chat.sender_id,
                   origin=parent_chat.origin if quiet else "",
                   session_key=parent_chat.session_key if quiet else "")
    run_id = loop.begin(chat=chat, text=SUBAGENT_BRIEF + task, history=[],
                        parent_run=parent_run, max_turns=max(1, min(MAX_TURNS, max_turns)))
    try:
        outcome = await loop.drive(run_id)
    except BaseException:  # cancelled by the parent's abort or timeout, or a bug
        loop.cancel(run_id, "the parent run stopped waiting for it")
        raise
    if outcome.status == ev.WAITING_APPROVAL:
        approval = loop.store.state(run_id).open_approval() or {}
        loop.cancel(run_id, "a sub-agent cannot wait for an approval")
        return (f"[sub-agent {run_id}: failed] It stopped because `{approval.get('tool', '?')}` "
                f"needs the user's approval ({approval.get('reason', 'risky call')}), and "
                "nobody can approve inside a sub-agent. Do that step yourself (the user will "
                "be asked), or spawn again with a task that needs no approval.")
    if outcome.status == ev.WAITING_USER:
        loop.cancel(run_id, "a sub-agent cannot ask the user")
        return (f"[sub-agent {run_id}: failed] It wanted to ask the user: {outcome.text!r}, "
                "but a sub-agent cannot ask anything. Ask the user yourself if needed, then "
                "spawn again with the answer in the task.")
    label = _STATUS_LABELS.get(outcome.status, outcome.status)
    return f"[sub-agent {run_id}: {label}]\n{outcome.text}".rstrip()


async def cancel_orphaned_subruns(loop: AgentLoop,
                                  owns: Callable[[str], bool] | None = None) -> int:
    """Cancel unfinished sub-runs left by a crash; call at boot before resuming runs.

    Their parent's ``spawn`` call was interrupted and is reported to the parent model as
    such, so finishing the sub-run would only post its answer into the chat out of context.
    With several daemons, `owns` limits this to the chats this node holds (another node's
    live sub-runs are its own), and a sub-run this process drives is never one.
    """
    cancelled = 0
    for run_id in await loop.store.find_open(chats=owns):
        if run_id in loop.driving:
            continue
        state = loop.store.state(run_id)
        if state.parent_run:
            loop.cancel(run_id, "the daemon restarted while this sub-agent was running")
            cancelled += 1
    return cancelled
