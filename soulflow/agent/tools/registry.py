"""`ToolRegistry`: the single path every tool call takes, from raw model arguments to safe output.

Order matters and is the security contract of the whole tools layer:

1. find the tool and parse the arguments;
2. validate them against the tool's JSON schema (the model gets every problem in one message);
3. decide approval on the arguments *as written* - secret references are still references, so
   an approval reason shown to the user can never contain a secret value; a tool may ask for
   an admins-only approval (`ApprovalNeed`), which the result carries to the run; a tool that
   runs code also asks when its arguments reference a secret (`code_secrets`);
4. open secret references all-or-nothing (a tool never runs half-decrypted);
5. run under a timeout, cancelled if the user aborts; only `ToolError` text reaches the model
   verbatim, anything else becomes a one-line "internal error";
6. mask every opened secret in the output (back to ``{{secret:NAME}}``; transformed forms of
   it and of the redactor's known values blanked), then truncate.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from soulflow import tracing
from soulflow.agent.errors import AgentError
from soulflow.agent.tools.base import (
    ApprovalNeed,
    Params,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)
from soulflow.agent.tools.code_secrets import with_code_secret_reason
from soulflow.security.errors import SecurityError
from soulflow.security.redact import Redactor
from soulflow.security.resolve import (
    mask_known_secrets,
    mask_tool_output,
    resolve_secret_references,
)
from soulflow.security.vault import chat_scope

log = logging.getLogger(__name__)

DEFAULT_MAX_OUTPUT_CHARS = 20_000
MAX_SCHEMA_PROBLEMS = 5
_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a function name

DynamicHandler = Callable[[Params, ToolContext], Awaitable[Any] | Any]


class _Aborted(AgentError):
    """The user set the context's abort event while the tool was running."""


class DynamicTool(Tool):
    """A tool defined at runtime (by the model, a skill or a plugin): always needs approval.

    Its code was not reviewed with the daemon, so every call is shown to the user first.
    """

    def __init__(
        self, name: str, description: str, parameters: dict[str, Any], handler: DynamicHandler
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self._handler = handler

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | ApprovalNeed | None:
        return "dynamic tool"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        result = self._handler(params, ctx)
        if inspect.isawaitable(result):
            result = await result
        return _as_text(result)


class ToolRegistry:
    """Named tools plus `execute`, the shared execution path (see the module docstring).

    ``redactor``, when given, learns every secret opened for a tool so log lines written while
    (or after) the tool runs are blanked too.
    """

    def __init__(
        self,
        *,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        redactor: Redactor | None = None,
    ) -> None:
        self.max_output_chars = max_output_chars
        self._redactor = redactor
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}

    # ----------------------------------------------------------------- registration

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a duplicate name, a bad name or an invalid schema is a ValueError."""
        if not _NAME_RE.fullmatch(tool.name or ""):
            raise ValueError(f"invalid tool name {tool.name!r}: use 1-64 of [A-Za-z0-9_-]")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        try:
            Draft202012Validator.check_schema(tool.parameters)
        except Exception as exc:  # SchemaError; its message says what is wrong
            raise ValueError(f"tool {tool.name!r} has an invalid parameters schema: {exc}") from exc
        self._tools[tool.name] = tool
        self._validators[tool.name] = Draft202012Validator(tool.parameters)

    def register_dynamic(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        handler: DynamicHandler,
    ) -> Tool:
        """Register a runtime-defined tool; every call to it needs approval ("dynamic tool")."""
        tool = DynamicTool(name, description, parameters, handler)
        self.register(tool)
        return tool

    def unregister(self, name: str) -> bool:
        """Remove a tool; return whether it existed."""
        self._validators.pop(name, None)
        return self._tools.pop(name, None) is not None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """All tools in OpenAI ``tools`` format, sorted by name (stable prompts cache better)."""
        return [self._tools[name].schema() for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    # ----------------------------------------------------------------- execution

    async def execute(self, name: str, params: Any, ctx: ToolContext) -> ToolResult:
        """Run one tool call through every rule; never raises except on cancellation. Its
        span is named by the tool only when it is registered: a name a model made up is
        the model's text, and stays out of traces."""
        if not tracing.active():
            return await self._execute(name, params, ctx)
        shown = name if name in self._tools else "unknown"
        with tracing.span(f"execute_tool {shown}", {"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.name": shown}) as span:
            result = await self._execute(name, params, ctx)
            span.set("soulflow.tool.status", result.status)
            if result.status == "error":
                span.fail("tool_error")
            return result

    async def _execute(self, name: str, params: Any, ctx: ToolContext) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self.names()) or "none"
            return _error(f"unknown tool {name!r}. Available tools: {available}.")
        parsed = _parse_params(params)
        if isinstance(parsed, str):
            return _error(f"invalid arguments for {name}: {parsed}")
        problems = self._schema_problems(name, parsed)
        if problems:
            return _error(f"invalid arguments for {name}: {problems}")
        try:
            need = None if ctx.approved else with_code_secret_reason(
                tool.needs_approval(parsed, ctx), tool, parsed)
        except ToolError as exc:
            return _error(str(exc))
        except Exception as exc:
            return _internal_error(tool.name, exc, {})
        if need is not None:
            return ToolResult("approval_required", "", need.reason, admins_only=need.admins_only)
        return await self._resolve_and_run(tool, parsed, ctx)

    def _schema_problems(self, name: str, params: Params) -> str:
        """Every schema violation as ``at 'path': message``, joined into one or two sentences."""
        found = self._validators[name].iter_errors(params)
        errors = sorted(found, key=lambda e: [str(part) for part in e.path])
        if not errors:
            return ""
        parts = [_describe_schema_error(err) for err in errors[:MAX_SCHEMA_PROBLEMS]]
        text = "; ".join(parts)
        if len(errors) > MAX_SCHEMA_PROBLEMS:
            text += f"; and {len(errors) - MAX_SCHEMA_PROBLEMS} more problem(s)"
        return text + ". Fix the arguments and call the tool again."

    async def _resolve_and_run(self, tool: Tool, params: Params, ctx: ToolContext) -> ToolResult:
        secrets: dict[str, str] = {}
        if ctx.vault is not None:
            try:
                report = await asyncio.to_thread(
                    partial(resolve_secret_references, params, ctx.vault,
                            chat=chat_scope(ctx.chat.provider, ctx.chat.chat_id)))
            except (SecurityError, OSError) as exc:  # vault-wide: key or file unusable
                log.error("secret vault unavailable for tool %s: %s", tool.name, exc)
                return _error(f"secret vault unavailable: {type(exc).__name__}")
            if not report.ok:
                return _error(f"secret_resolution_required: {_resolution_detail(report)}")
            secrets = report.secrets
            if secrets and self._redactor is not None:
                self._redactor.register(*secrets.values())
            if secrets and not ctx.approved:
                late = self._late_approval(tool, report.value, ctx)
                if late is not None:
                    return late
            params = report.value
        result = await self._run(tool, params, ctx, secrets)
        return self._finish(result, secrets)

    def _late_approval(self, tool: Tool, resolved: Params, ctx: ToolContext) -> ToolResult | None:
        """Re-ask `needs_approval` with secrets filled in.

        A secret's value could turn a harmless-looking call into one that needs approval (a
        path such as ``chats/x/{{secret:X}}``). The reason computed here may contain the
        value, so it is never shown: the user gets a generic one (admins-only when the filled
        call is).
        """
        try:
            needed = ApprovalNeed.of(tool.needs_approval(resolved, ctx))
        except Exception:  # whatever went wrong would show the value: ask the user instead
            needed = ApprovalNeed("refused")
        if needed is None:
            return None
        return ToolResult("approval_required", "",
                          "needs approval once its secret values are filled in",
                          admins_only=needed.admins_only)

    async def _run(
        self, tool: Tool, params: Params, ctx: ToolContext, secrets: Mapping[str, str]
    ) -> ToolResult:
        timeout = tool.timeout_s
        try:
            timeout = tool.timeout_for(params)
            output = await _run_with_limits(tool.run(params, ctx), timeout, ctx.abort)
        except ToolError as exc:
            return _error(str(exc))
        except TimeoutError:
            return _error(f"{tool.name} timed out after {timeout:g} s")
        except _Aborted:
            return _error(f"{tool.name} was aborted by the user")
        except Exception as exc:
            return _internal_error(tool.name, exc, secrets)
        return ToolResult("ok", _as_text(output))

    def _finish(self, result: ToolResult, secrets: Mapping[str, str]) -> ToolResult:
        """Mask before truncating, so a cut can never leave half a plaintext unmasked."""
        result.output = self._truncate(mask_tool_output(result.output, secrets, self._redactor))
        return result

    def _truncate(self, text: str) -> str:
        extra = len(text) - self.max_output_chars
        if extra <= 0:
            return text
        return f"{text[: self.max_output_chars]}\n[output truncated: {extra} more characters]"


async def _run_with_limits(
    coro: Awaitable[Any], timeout: float, abort: asyncio.Event | None
) -> Any:
    """Await ``coro`` for at most ``timeout`` seconds, cancelling it if ``abort`` is set.

    Cancellation is how tools clean up (the shell tool kills its process group in a
    ``finally``), so both limits go through ``task.cancel()``.
    """
    if abort is None:
        return await asyncio.wait_for(coro, timeout)
    task = asyncio.ensure_future(coro)
    if abort.is_set():
        task.cancel()
    aborted = asyncio.ensure_future(abort.wait())
    try:
        done, _ = await asyncio.wait(
            {task, aborted}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        aborted.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # let the tool clean up; its outcome no longer matters
    if task in done and not task.cancelled():
        return task.result()
    if not task.cancelled() and task.exception() is not None:
        log.debug("tool finished with %r after being stopped", task.exception())
    raise _Aborted if abort.is_set() else TimeoutError


def _parse_params(params: Any) -> Params | str:
    """The arguments as a dict, or a sentence saying why they are unusable."""
    if params is None or (isinstance(params, str) and not params.strip()):
        return {}
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError as exc:
            return f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(params, dict):
        return f"the arguments must be a JSON object, not {type(params).__name__}"
    return params


def _describe_schema_error(err: ValidationError) -> str:
    path = "/".join(str(part) for part in err.absolute_path)
    message = err.message if len(err.message) <= 200 else err.message[:200] + "..."
    return f"at '{path}': {message}" if path else message


def _resolution_detail(report: Any) -> str:
    parts = []
    if report.missing:
        parts.append("missing secret(s) " + ", ".join(report.missing))
    if report.invalid:
        parts.append("secret(s) that could not be decrypted " + ", ".join(report.invalid))
    names = "; ".join(parts)
    return (
        f"{names}. The tool did not run. Ask the user to set them with `/secret set NAME` "
        "in a direct message (or `soulflow secret set NAME`)."
    )


def _mask(text: str, secrets: Mapping[str, str]) -> str:
    return mask_known_secrets(text, secrets) if secrets else text


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _internal_error(name: str, exc: Exception, secrets: Mapping[str, str]) -> ToolResult:
    """A bug in a tool: the traceback goes to the log (masked), one line goes to the model."""
    trace = "".join(traceback.format_exception(exc))
    log.error("internal error in tool %s:\n%s", name, _mask(trace, secrets))
    return _error(f"internal error in tool {name}: {type(exc).__name__}: {exc}")


def _error(message: str) -> ToolResult:
    return ToolResult("error", f"Error: {message}")
