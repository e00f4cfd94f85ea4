"""A secret cannot be read back through code: a call that runs code with a secret waits for an
approval naming it, and what the approved code prints comes back with every transformed form
of the value blanked - shown with the real `exec` and `python_repl` in the bubblewrap sandbox.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from soulflow.agent.tools.base import ChatRef, Params, Tool, ToolContext
from soulflow.agent.tools.python_repl import PythonReplTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.shell import ExecTool
from soulflow.security.redact import Redactor
from soulflow.security.vault import SecretVault
from tests.security.readable import readable_forms
from tests.tools.conftest import MakeCtx
from tests.tools.sandbox_support import working_sandbox

# URL-reserved characters (so URL-encoding changes it), no quote (so '...' holds it in sh)
VALUE = "Tiger/Lily+7&pw=Q!x@9"
OTHER = "Second-Value-For-Two-Names"


class CodeTool(Tool):
    """Runs "code" (echoes it); declares it, so secrets in its arguments need approval."""

    name = "code"
    parameters = {"type": "object", "properties": {"code": {"type": "string"}},
                  "required": ["code"]}
    runs_code = True

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        self.calls: list[Params] = []

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return self.reason

    async def run(self, params: Params, ctx: ToolContext) -> str:
        self.calls.append(params)
        return params["code"][::-1]


class PlainTool(CodeTool):
    """The same, but it does not run code: a secret reference alone asks nothing."""

    name = "plain"
    runs_code = False


@pytest.fixture
def stored(vault: SecretVault) -> SecretVault:
    vault.set_many({"PW": VALUE, "OTHER": OTHER})
    return vault


async def test_a_code_tool_with_a_secret_waits_for_an_approval_naming_it(
        make_ctx: MakeCtx, stored: SecretVault) -> None:
    tool = CodeTool()
    registry = ToolRegistry()
    registry.register(tool)
    params = {"code": "print('{{secret:PW}}'[::-1], '{{secret:OTHER}}', '{{secret:PW}}')"}
    result = await registry.execute("code", params, make_ctx(vault=stored))
    assert result.status == "approval_required"
    assert result.reason is not None and result.reason.startswith(
        "runs code with secrets PW, OTHER (")
    assert VALUE not in result.reason and tool.calls == []

    approved = await registry.execute("code", params, make_ctx(vault=stored, approved=True))
    assert approved.status == "ok"
    assert tool.calls == [{"code": f"print('{VALUE}'[::-1], '{OTHER}', '{VALUE}')"}]
    assert readable_forms(approved.output, VALUE) == []
    assert readable_forms(approved.output, OTHER) == []
    assert "[REDACTED: reversed secret PW]" in approved.output


async def test_the_tools_own_reason_and_the_secret_make_one_approval(
        make_ctx: MakeCtx, stored: SecretVault) -> None:
    registry = ToolRegistry()
    registry.register(CodeTool(reason="network access requested"))
    result = await registry.execute("code", {"code": "x {{secret:PW}}"}, make_ctx(vault=stored))
    assert result.status == "approval_required"
    assert result.reason is not None
    assert result.reason.startswith("network access requested; runs code with secret PW (")


async def test_code_without_secrets_and_secrets_without_code_ask_nothing_new(
        make_ctx: MakeCtx, stored: SecretVault) -> None:
    registry = ToolRegistry()
    code, plain = CodeTool(), PlainTool()
    registry.register(code)
    registry.register(plain)
    assert (await registry.execute("code", {"code": "print(1)"}, make_ctx(vault=stored))).ok
    result = await registry.execute("plain", {"code": "{{secret:PW}}"}, make_ctx(vault=stored))
    assert result.ok and plain.calls == [{"code": VALUE}]
    # its output is still masked, transformed forms included
    assert result.output == "[REDACTED: reversed secret PW]"


async def test_forms_of_a_value_the_redactor_knows_are_blanked_without_a_reference(
        make_ctx: MakeCtx, stored: SecretVault) -> None:
    """A value opened by an earlier call (say, written to a file) and read back by code that
    names no secret: the redactor knows it, so its forms are blanked too."""
    redactor = Redactor(detectors=())
    registry = ToolRegistry(redactor=redactor)
    registry.register(PlainTool())
    registry.register(CodeTool())
    await registry.execute("plain", {"code": "{{secret:PW}}"}, make_ctx(vault=stored))
    result = await registry.execute("code", {"code": VALUE}, make_ctx(vault=stored))
    assert result.ok and result.output == "[REDACTED]"


# ----------------------------------------------------------------- the real sandbox


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()


def _ctx(workspace: Path, vault: SecretVault, *, approved: bool = False) -> ToolContext:
    return ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"), vault=vault,
                       approved=approved)


def _python(code: str) -> str:
    """A `python3 -c` command line whose code gets the secret as its first argument."""
    return f"python3 -c {shlex.quote(code)} '{{{{secret:PW}}}}'"


# Each prints the secret in a form the model must not be able to read.
CAUGHT = {
    "rev": "printf '%s\\n' '{{secret:PW}}' | rev",
    "base64": "echo '{{secret:PW}}' | base64",
    "base64 after a prefix": "printf 'user:%s' '{{secret:PW}}' | base64 -w0",
    "base64url": "printf %s '{{secret:PW}}' | basenc --base64url",
    "xxd -p": "printf %s '{{secret:PW}}' | xxd -p",
    "od hex": "printf %s '{{secret:PW}}' | od -An -tx1",
    "tr to upper case": "printf %s '{{secret:PW}}' | tr a-z A-Z",
    "fold -w1": "printf %s '{{secret:PW}}' | fold -w1",
    "url-encoded (python)": _python(
        "import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=''))"),
    "every byte url-encoded (python)": _python(
        "import sys; print(''.join('%%%02x' % b for b in sys.argv[1].encode()))"),
    "in a query string (python)": _python(
        "import sys, urllib.parse; print('https://x.test/?' + "
        "urllib.parse.urlencode({'user': 'me', 'pw': sys.argv[1]}))"),
}


# What redaction cannot undo - a value cut into pieces, or spread over lines that carry
# offsets too: approval is the guard for these.
NOT_CAUGHT = {
    "cut -c": "printf %s '{{secret:PW}}' | cut -c1-8",
    "od -c": "printf %s '{{secret:PW}}' | od -c",
    "xxd": "printf %s '{{secret:PW}}' | xxd",
}
EVERY = {**CAUGHT, **NOT_CAUGHT}


@pytest.mark.parametrize("command", EVERY.values(), ids=list(EVERY))
async def test_exec_with_a_secret_waits_for_an_approval_naming_it(
        command: str, sandbox: CodeSandbox, workspace: Path, stored: SecretVault) -> None:
    registry = ToolRegistry()
    registry.register(ExecTool(sandbox))
    asked = await registry.execute("exec", {"command": f"touch ran; {command}"},
                                   _ctx(workspace, stored))
    assert asked.status == "approval_required"
    assert asked.reason == ("runs code with secret PW (code can print a value in forms that "
                            "redaction does not catch)")
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("command", CAUGHT.values(), ids=list(CAUGHT))
async def test_an_approved_exec_shows_no_transformed_form_of_the_value(
        command: str, sandbox: CodeSandbox, workspace: Path, stored: SecretVault) -> None:
    registry = ToolRegistry(max_output_chars=200_000, redactor=Redactor(detectors=()))
    registry.register(ExecTool(sandbox))
    ran = await registry.execute("exec", {"command": command},
                                 _ctx(workspace, stored, approved=True))
    assert ran.status == "ok", ran.output
    assert "[exit code: 0]" in ran.output
    assert "[REDACTED: " in ran.output and "secret PW]" in ran.output
    assert readable_forms(ran.output, VALUE) == [], ran.output


async def test_python_repl_asks_first_and_hides_what_it_prints(
        sandbox: CodeSandbox, workspace: Path, stored: SecretVault) -> None:
    registry = ToolRegistry()
    registry.register(PythonReplTool(sandbox))
    code = ("s = '{{secret:PW}}'\n"
            "print(s[::-1]); print(s.encode().hex()); print(s.upper())\n"
            "print(''.join('%%%02X' % b for b in s.encode()))")
    asked = await registry.execute("python_repl", {"code": code}, _ctx(workspace, stored))
    assert asked.status == "approval_required" and "secret PW" in (asked.reason or "")
    ran = await registry.execute("python_repl", {"code": code},
                                 _ctx(workspace, stored, approved=True))
    assert ran.status == "ok", ran.output
    assert readable_forms(ran.output, VALUE) == [], ran.output
    assert json.dumps(ran.output).count("[REDACTED: ") == 4
