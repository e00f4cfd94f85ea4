"""ToolRegistry.execute: the one path every call takes (parse, validate, approve, resolve, run,
mask, truncate)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from soulflow.agent.tools.base import (
    Params,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.security.redact import Redactor
from soulflow.security.syntax import REDACTED
from soulflow.security.vault import SecretVault
from tests.tools.conftest import MakeCtx

PLAIN = "s3cr3t-value-9876"


class EchoTool(Tool):
    """Echoes its arguments as JSON and remembers every call."""

    name = "echo"
    description = "Echo the arguments."
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer", "minimum": 1},
            "nested": {"type": "object"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[Params] = []

    async def run(self, params: Params, ctx: ToolContext) -> str:
        self.calls.append(params)
        return json.dumps(params)


class RiskyTool(EchoTool):
    name = "risky"

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return f"risky call with {params['text']}"


class PathyTool(EchoTool):
    """Needs approval only when its argument climbs with '..' (decided on the value)."""

    name = "pathy"

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return "climbs" if ".." in params["text"] else None


class SlowTool(Tool):
    name = "slow"
    timeout_s = 0.2

    def __init__(self) -> None:
        self.cancelled = False

    async def run(self, params: Params, ctx: ToolContext) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "finished"


class BoomTool(Tool):
    name = "boom"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    async def run(self, params: Params, ctx: ToolContext) -> str:
        raise RuntimeError(f"kaboom {params.get('text', '')}")


class FailTool(Tool):
    name = "fail"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        raise ToolError("the input file is empty")


class BigTool(Tool):
    name = "big"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        return "x" * 100


@pytest.fixture
def echo() -> EchoTool:
    return EchoTool()


@pytest.fixture
def registry(echo: EchoTool) -> ToolRegistry:
    reg = ToolRegistry()
    for tool in (echo, RiskyTool(), PathyTool(), BoomTool(), FailTool(), BigTool()):
        reg.register(tool)
    return reg


# ----------------------------------------------------------------- registration


def test_register_rejects_duplicates_bad_names_and_bad_schemas(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(EchoTool())

    class Nameless(EchoTool):
        name = "has space"

    with pytest.raises(ValueError, match="invalid tool name"):
        registry.register(Nameless())

    class BadSchema(EchoTool):
        name = "bad_schema"
        parameters = {"type": "no-such-type"}

    with pytest.raises(ValueError, match="invalid parameters schema"):
        registry.register(BadSchema())


def test_names_get_and_openai_schemas(registry: ToolRegistry, echo: EchoTool) -> None:
    assert registry.names() == ["big", "boom", "echo", "fail", "pathy", "risky"]
    assert registry.get("echo") is echo and registry.get("nope") is None
    schemas = registry.schemas()
    assert [s["function"]["name"] for s in schemas] == registry.names()
    first = next(s for s in schemas if s["function"]["name"] == "echo")
    assert first == {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the arguments.",
            "parameters": EchoTool.parameters,
        },
    }
    assert registry.unregister("big") and "big" not in registry


# ----------------------------------------------------------------- arguments


async def test_unknown_tool_lists_available_names(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.execute("nope", {}, ctx)
    assert result.status == "error"
    assert "unknown tool 'nope'" in result.output
    assert "big, boom, echo, fail, pathy, risky" in result.output


async def test_json_string_arguments_are_parsed(registry: ToolRegistry, echo: EchoTool, ctx):
    result = await registry.execute("echo", '{"text": "hi"}', ctx)
    assert result == ToolResult("ok", '{"text": "hi"}')
    assert echo.calls == [{"text": "hi"}]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"text": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not list"),
        (42, "must be a JSON object, not int"),
    ],
)
async def test_unusable_arguments_are_errors(
    registry: ToolRegistry, echo: EchoTool, ctx: ToolContext, raw: Any, expected: str
) -> None:
    result = await registry.execute("echo", raw, ctx)
    assert result.status == "error"
    assert result.output.startswith("Error: invalid arguments for echo:")
    assert expected in result.output
    assert echo.calls == []


async def test_schema_errors_are_all_listed(registry: ToolRegistry, echo: EchoTool, ctx):
    result = await registry.execute("echo", {"count": 0, "extra": 1}, ctx)
    assert result.status == "error"
    out = result.output
    assert "'text' is a required property" in out
    assert "at 'count': 0 is less than the minimum of 1" in out
    assert "'extra' was unexpected" in out
    assert out.endswith("Fix the arguments and call the tool again.")
    assert echo.calls == []


# ----------------------------------------------------------------- approval


async def test_approval_required_does_not_run(registry: ToolRegistry, make_ctx: MakeCtx):
    risky = registry.get("risky")
    assert isinstance(risky, RiskyTool)
    result = await registry.execute("risky", {"text": "rm"}, make_ctx())
    assert result == ToolResult("approval_required", "", "risky call with rm")
    assert risky.calls == []

    approved = await registry.execute("risky", {"text": "rm"}, make_ctx(approved=True))
    assert approved.status == "ok"
    assert risky.calls == [{"text": "rm"}]


async def test_dynamic_tools_always_need_approval(registry: ToolRegistry, make_ctx: MakeCtx):
    seen: list[Params] = []

    def sync_handler(params: Params, ctx: ToolContext) -> dict[str, Any]:
        seen.append(params)
        return {"sum": params["a"] + params["b"]}

    async def async_handler(params: Params, ctx: ToolContext) -> str:
        return "async ok"

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    registry.register_dynamic("adder", "Add two numbers.", schema, sync_handler)
    registry.register_dynamic("asyncer", "Async.", {"type": "object"}, async_handler)

    pending = await registry.execute("adder", {"a": 1, "b": 2}, make_ctx())
    assert pending == ToolResult("approval_required", "", "dynamic tool")
    assert seen == []

    done = await registry.execute("adder", {"a": 1, "b": 2}, make_ctx(approved=True))
    assert done == ToolResult("ok", '{"sum": 3}')
    assert (await registry.execute("asyncer", {}, make_ctx(approved=True))).output == "async ok"


# ----------------------------------------------------------------- secrets


async def test_secrets_resolved_for_the_tool_and_masked_in_output(
    registry: ToolRegistry, echo: EchoTool, make_ctx: MakeCtx, vault: SecretVault
) -> None:
    vault.set("API_TOKEN", PLAIN)
    params = {
        "text": "token={{secret:API_TOKEN}}",
        "nested": {"headers": ["Authorization: Bearer {{secret:API_TOKEN}}"]},
    }
    result = await registry.execute("echo", params, make_ctx(vault=vault))

    assert result.status == "ok"
    assert echo.calls == [
        {"text": f"token={PLAIN}", "nested": {"headers": [f"Authorization: Bearer {PLAIN}"]}}
    ]
    assert PLAIN not in result.output
    assert json.loads(result.output) == params  # echoed plaintext masked back to references
    assert params["text"] == "token={{secret:API_TOKEN}}"  # the caller's dict is untouched


async def test_missing_secret_stops_the_call(
    registry: ToolRegistry, echo: EchoTool, make_ctx: MakeCtx, vault: SecretVault
) -> None:
    vault.set("PRESENT", PLAIN)
    params = {"text": "{{secret:PRESENT}} {{secret:ABSENT_ONE}}"}
    result = await registry.execute("echo", params, make_ctx(vault=vault))
    assert result.status == "error"
    assert result.output.startswith("Error: secret_resolution_required:")
    assert "ABSENT_ONE" in result.output
    assert PLAIN not in result.output
    assert echo.calls == []


async def test_approval_reason_never_contains_the_secret(
    registry: ToolRegistry, make_ctx: MakeCtx, vault: SecretVault
) -> None:
    vault.set("API_TOKEN", PLAIN)
    result = await registry.execute(
        "risky", {"text": "{{secret:API_TOKEN}}"}, make_ctx(vault=vault)
    )
    assert result.status == "approval_required"
    assert result.reason == "risky call with {{secret:API_TOKEN}}"


async def test_secret_that_changes_the_approval_decision_asks_generically(
    registry: ToolRegistry, make_ctx: MakeCtx, vault: SecretVault
) -> None:
    vault.set("SNEAKY", "../../outside")
    pathy = registry.get("pathy")
    assert isinstance(pathy, PathyTool)
    result = await registry.execute("pathy", {"text": "memory/{{secret:SNEAKY}}"},
                                    make_ctx(vault=vault))
    assert result.status == "approval_required"
    assert result.reason is not None and "outside" not in result.reason
    assert pathy.calls == []
    approved = await registry.execute(
        "pathy", {"text": "memory/{{secret:SNEAKY}}"}, make_ctx(vault=vault, approved=True)
    )
    assert approved.status == "ok"


async def test_opened_secrets_reach_the_redactor(echo: EchoTool, make_ctx: MakeCtx, vault):
    redactor = Redactor(detectors=())
    registry = ToolRegistry(redactor=redactor)
    registry.register(echo)
    vault.set("API_TOKEN", PLAIN)
    await registry.execute("echo", {"text": "{{secret:API_TOKEN}}"}, make_ctx(vault=vault))
    assert redactor.redact(f"log line {PLAIN}") == f"log line {REDACTED}"


# ----------------------------------------------------------------- running


async def test_tool_error_message_is_shown(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.execute("fail", {}, ctx)
    assert result == ToolResult("error", "Error: the input file is empty")


async def test_internal_error_is_one_line_and_logged_masked(
    registry: ToolRegistry, make_ctx: MakeCtx, vault: SecretVault, caplog
) -> None:
    vault.set("API_TOKEN", PLAIN)
    caplog.set_level(logging.ERROR, logger="soulflow.agent.tools.registry")
    result = await registry.execute("boom", {"text": "{{secret:API_TOKEN}}"},
                                    make_ctx(vault=vault))
    assert result.status == "error"
    assert result.output == (
        "Error: internal error in tool boom: RuntimeError: kaboom {{secret:API_TOKEN}}"
    )
    assert "Traceback" in caplog.text and "RuntimeError" in caplog.text
    assert PLAIN not in caplog.text


async def test_timeout_cancels_the_tool(ctx: ToolContext) -> None:
    registry = ToolRegistry()
    slow = SlowTool()
    registry.register(slow)
    result = await registry.execute("slow", {}, ctx)
    assert result == ToolResult("error", "Error: slow timed out after 0.2 s")
    assert slow.cancelled


async def test_abort_cancels_the_tool(make_ctx: MakeCtx) -> None:
    registry = ToolRegistry()
    slow = SlowTool()
    slow.timeout_s = 5
    registry.register(slow)
    abort = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, abort.set)
    result = await registry.execute("slow", {}, make_ctx(abort=abort))
    assert result == ToolResult("error", "Error: slow was aborted by the user")
    assert slow.cancelled

    already = await registry.execute("slow", {}, make_ctx(abort=abort))
    assert already.output == "Error: slow was aborted by the user"


async def test_output_is_truncated_with_a_note(ctx: ToolContext) -> None:
    registry = ToolRegistry(max_output_chars=10)
    registry.register(BigTool())
    result = await registry.execute("big", {}, ctx)
    assert result.output == "x" * 10 + "\n[output truncated: 90 more characters]"
