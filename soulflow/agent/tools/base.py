"""What every tool is made of: the call context, the result, the error type and the base class.

Tools are small classes with a JSON-schema ``parameters`` dict and an async ``run``. They never
validate their own arguments, ask for approval or open secrets: `ToolRegistry.execute` (in
`soulflow.agent.tools.registry`) is the one path every call goes through, so those rules live in
exactly one place. A tool only raises `ToolError` for failures the model should read and fix;
anything else is treated as a bug and reported without a traceback.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from soulflow.agent.errors import AgentError
from soulflow.contracts import ApprovalNeed, ChatRef, OutboundMessage
from soulflow.security.vault import SecretVault

__all__ = [
    "ApprovalNeed",
    "ChatRef",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolServices",
]

# `ChatRef` (the chat a tool call belongs to: where replies, files and approvals go) is the one
# chat type of `soulflow.contracts`, re-exported here for the tools, as is `ApprovalNeed` (what
# `Tool.needs_approval` may return to ask for an admin's approval rather than anyone's).

Params = dict[str, Any]
ServiceFn = Callable[..., Awaitable[Any]]


class ToolError(AgentError):
    """A clear, user-facing failure: its message is shown to the model as-is (no traceback)."""


# Human names used in "the ... service is not available here" errors.
_SERVICE_LABELS = {
    "send_message": "message",
    "request_file": "file request",
    "spawn": "spawn",
    "schedule": "scheduler",
    "render_diagram": "diagram rendering",
}


@dataclass(slots=True)
class ToolServices:
    """Runtime capabilities injected by the daemon; any of them may be absent.

    Kept as plain optional callables (not an interface) so tests and the `/repl` command can
    build a context with only what they need. Tools fetch one with `require`, which turns a
    missing service into a `ToolError` the model can understand instead of an AttributeError.
    """

    send_message: Callable[[OutboundMessage], Awaitable[None]] | None = None
    request_file: ServiceFn | None = None
    spawn: ServiceFn | None = None
    schedule: ServiceFn | None = None
    render_diagram: ServiceFn | None = None

    def require(self, name: str) -> ServiceFn:
        """Return the service called ``name`` or raise a `ToolError` saying it is unavailable."""
        if name not in {f.name for f in fields(self)}:
            raise ValueError(f"unknown tool service {name!r}")
        service = getattr(self, name)
        if service is None:
            label = _SERVICE_LABELS.get(name, name)
            raise ToolError(f"the {label} service is not available here")
        return service


@dataclass(slots=True)
class ToolContext:
    """Everything a tool call may use besides its arguments.

    ``approved`` is True only when the user has approved this exact call; ``abort`` is set when
    the user cancels the turn (the registry then cancels the running tool).
    """

    workspace: Path
    chat: ChatRef
    vault: SecretVault | None = None
    approved: bool = False
    abort: asyncio.Event | None = None
    services: ToolServices = field(default_factory=ToolServices)


ToolStatus = Literal["ok", "error", "approval_required"]


@dataclass(slots=True)
class ToolResult:
    """Outcome of one call as the model and the approval flow see it.

    ``reason`` is set for ``approval_required`` (why the user must approve); it is computed
    from the arguments as the model wrote them, so it never contains a secret value.
    ``admins_only``: only an admin or the local operator may approve it (see `ApprovalNeed`).
    """

    status: ToolStatus
    output: str
    reason: str | None = None
    admins_only: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Tool(abc.ABC):
    """Base class for a tool: subclasses set the class attributes and implement `run`.

    It implements `soulflow.contracts.ToolSpec`, the view of a tool that layers below the
    agent (task executors, the dashboard) may rely on.

    ``idempotent`` tools are safe to re-run after a crash (reads, fetches, pure computations);
    the runtime uses it to decide whether an interrupted call may be retried automatically.
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    idempotent: bool = False
    runs_code: bool = False  # runs code the model wrote: a secret in its arguments asks first
    timeout_s: float = 60

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | ApprovalNeed | None:
        """Why this call needs approval, or None. Sees unresolved secret references.

        A plain reason may be approved by the requester, an admin or the local operator; an
        `ApprovalNeed` with ``admins_only`` by an admin or the local operator only. Raise
        `ToolError` for a call that is refused whoever approves it."""
        return None

    def timeout_for(self, params: Params) -> float:
        """Wall-clock budget for this call; tools with a timeout argument widen it."""
        return self.timeout_s

    @abc.abstractmethod
    async def run(self, params: Params, ctx: ToolContext) -> str:
        """Do the work and return text for the model; raise `ToolError` for clear failures."""

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI ``tools`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
