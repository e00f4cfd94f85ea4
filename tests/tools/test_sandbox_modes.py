"""Where bubblewrap is missing or refused by the host: detection says why, `exec` and
`python_repl` ask for approval on every call (and run unconfined only once approved), and
`/repl` answers with how to enable the sandbox."""

from __future__ import annotations

import getpass
import stat
from pathlib import Path

import pytest

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.bwrap import BwrapDetector, SandboxMode
from soulflow.agent.tools.python_sandbox import run_python
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.conversation.capability_commands import make_repl_command
from tests.tools.sandbox_support import working_sandbox

# A bwrap that exists but cannot build a sandbox, as on a host without user namespaces.
REFUSING_BWRAP = """#!/bin/sh
case "$1" in
  --help) echo "usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]"; echo "--disable-userns" ;;
  --version) echo "bubblewrap 0.8.0" ;;
  *) echo "bwrap: No permissions to creating new namespace" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def missing(tmp_path: Path) -> CodeSandbox:
    return CodeSandbox(detector=BwrapDetector(str(tmp_path / "no-such-bwrap")))


@pytest.fixture
def refusing(tmp_path: Path) -> CodeSandbox:
    script = tmp_path / "bwrap"
    script.write_text(REFUSING_BWRAP)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return CodeSandbox(detector=BwrapDetector(str(script)))


def _ctx(workspace: Path, *, approved: bool = False) -> ToolContext:
    return ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"), approved=approved)


def test_detection_says_why_and_how(missing: CodeSandbox, refusing: CodeSandbox) -> None:
    gone = missing.status()
    assert gone.mode is SandboxMode.UNAVAILABLE and not gone.available
    assert "apt-get install bubblewrap" in gone.detail
    refused = refusing.status()
    assert refused.mode is SandboxMode.UNAVAILABLE
    assert "No permissions to creating new namespace" in refused.detail
    assert "user namespaces" in refused.detail
    assert refused.as_dict() == {"mode": "unavailable", "detail": refused.detail}


def test_detection_runs_once_per_detector(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    script = tmp_path / "bwrap"
    script.write_text(f'#!/bin/sh\necho "$1" >> {log}\n' + REFUSING_BWRAP.split("\n", 1)[1])
    script.chmod(0o755)
    detector = BwrapDetector(str(script))
    first = detector.status()
    assert detector.status() is first and detector.features() is None
    assert len(log.read_text().splitlines()) == 3  # --help, --version, the probe


def test_a_working_host_reports_bubblewrap() -> None:
    status = working_sandbox().status()
    assert status.mode is SandboxMode.BUBBLEWRAP and "bubblewrap" in status.detail


async def test_exec_needs_approval_for_every_call(
    missing: CodeSandbox, workspace: Path
) -> None:
    registry = build_default_registry(sandbox=missing)
    asked = await registry.execute("exec", {"command": "echo hi"}, _ctx(workspace))
    assert asked.status == "approval_required"
    assert asked.reason is not None and asked.reason.startswith("no OS sandbox: runs unconfined")
    # unconfined, it could rewrite the operator's files: the requester alone may not allow it
    assert asked.admins_only
    # without a sandbox the outside-the-workspace rule is back, next to the reason above
    outside = await registry.execute("exec", {"command": "cat /etc/hostname"}, _ctx(workspace))
    assert outside.reason is not None and "outside the workspace" in outside.reason
    done = await registry.execute("exec", {"command": "echo hi"},
                                  _ctx(workspace, approved=True))
    assert done.output == "hi\n[exit code: 0]"


async def test_python_repl_needs_approval_for_every_call(
    refusing: CodeSandbox, workspace: Path
) -> None:
    registry = build_default_registry(sandbox=refusing)
    asked = await registry.execute("python_repl", {"code": "1 + 1"}, _ctx(workspace))
    assert asked.status == "approval_required"
    assert asked.reason == refusing.unconfined_reason()
    done = await registry.execute("python_repl", {"code": "1 + 1"},
                                  _ctx(workspace, approved=True))
    assert done.output == "2\n"
    # the AST layer still refuses early, approved or not
    refused = await registry.execute("python_repl", {"code": "import os"},
                                     _ctx(workspace, approved=True))
    assert refused.status == "error" and "'import'" in refused.output


async def test_run_python_refuses_without_approval(missing: CodeSandbox) -> None:
    result = await run_python("1 + 1", sandbox=missing)
    assert not result.ok and result.error is not None
    assert result.error.startswith("no OS sandbox: runs unconfined as")


async def test_repl_command_explains_how_to_enable(missing: CodeSandbox) -> None:
    reply = await make_repl_command(missing)(
        Command("repl", "1 + 1"), InboundMessage("local", "c1", "m1", "u1", "/repl 1 + 1"))
    assert reply.startswith("/repl is off because this host has no OS sandbox")
    assert "apt-get install bubblewrap" in reply and "user namespaces" in reply


async def test_repl_command_runs_in_the_sandbox() -> None:
    repl = make_repl_command(working_sandbox())
    message = InboundMessage("local", "c1", "m1", "u1", "/repl")
    assert await repl(Command("repl", "```python\nsum(range(10))```"), message) == "```\n45\n```"
    assert await repl(Command("repl", "  "), message) == (
        "Usage: /repl <python code>, e.g. /repl sum(range(10))")


def test_unconfined_reason_names_the_user() -> None:
    assert CodeSandbox.unconfined_reason() == (
        f"no OS sandbox: runs unconfined as {getpass.getuser()}")
