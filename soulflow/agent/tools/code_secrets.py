"""A call that runs code with a secret waits for the user.

Redaction of tool output (`soulflow.security.transformed`) catches the forms of a value it can
compute - reversed, hex, base64, URL-encoded, split by whitespace - but code holding the value
can also cut it into pieces (`cut -c1-4`), spread it over an `od -c` dump or encode it in ways
no list covers, and then the model reads it. So the approval is the guard: a tool that runs
code declares it (``runs_code = True``: `exec`, `python_repl`), and when such a call's
arguments reference a secret it waits for approval naming the secret(s). The approval message
shows the arguments as the model wrote them, references and all, never a value. It is a normal
approval (the requester or an admin decides); approved, the call runs with the values as before.

`/repl` needs no flag: chat commands get the message as sealed, and nothing resolves the
references in its code, so they stay literal text there.

The rule lives here and is applied in the one execution path (`ToolRegistry.execute`) and in
the task planner's risk list, so no tool has to remember it in its own `needs_approval`.
"""

from __future__ import annotations

from dataclasses import replace

from soulflow.agent.tools.base import ApprovalNeed, Params, Tool
from soulflow.security.references import reference_labels


def runs_code(tool: Tool) -> bool:
    """Whether ``tool`` runs code the model wrote (a class attribute ``runs_code = True``)."""
    return tool.runs_code


def code_secret_reason(tool: Tool, params: Params) -> str | None:
    """Why this call must be approved because its code gets secret values, or None.

    Decided on the arguments as written, so the reason holds names, never values.
    """
    if not runs_code(tool):
        return None
    labels = reference_labels(params)
    if not labels:
        return None
    noun = "secret" if len(labels) == 1 else "secrets"
    return (f"runs code with {noun} {', '.join(labels)} (code can print a value in forms "
            "that redaction does not catch)")


def with_code_secret_reason(need: str | ApprovalNeed | None, tool: Tool,
                            params: Params) -> ApprovalNeed | None:
    """The tool's own approval ``need`` joined with `code_secret_reason` (either may be
    missing): one approval covers both, and an admins-only need stays admins-only."""
    own = ApprovalNeed.of(need)
    extra = code_secret_reason(tool, params)
    if not extra:
        return own
    if own is None:
        return ApprovalNeed(extra)
    return replace(own, reason=f"{own.reason}; {extra}")
