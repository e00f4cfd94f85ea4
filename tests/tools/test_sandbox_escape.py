"""The escape corpus against the Python sandbox: through `python_repl`, through `/repl`, and
raw through the bubblewrap layer with no AST checks at all.

After every technique: no canary file exists on the host (workspace, ``/tmp``, ``/var/tmp``,
``/dev/shm``), the loopback listener saw no connection, neither the planted key nor the
``.env`` token appears in any output, and no process of the attempt is left.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.bwrap import Limits
from soulflow.agent.tools.process import OutputPipe
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.conversation.capability_commands import make_repl_command
from tests.tools.escape_corpus import NOT_ATTACKING, TECHNIQUES, Target, program
from tests.tools.listener import Listener
from tests.tools.sandbox_support import wait_none_with, working_sandbox

SANDBOX_PROCESS_MARK = "/opt/soulflow-sandbox/"  # every sandboxed python's command line
RAW_LIMITS = Limits(cpu_s=3, memory_mb=256, max_pids=16, file_size=1024 * 1024, open_files=64)
RAW_TIMEOUT_S = 4.0


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()


@pytest.fixture
async def target(tmp_path: Path, listener: Listener) -> AsyncIterator[Target]:
    workspace = tmp_path / "workspace"
    (workspace / "runtime" / "security").mkdir(parents=True)
    key_bytes = f"CANARY-KEY-{uuid.uuid4().hex}".encode()
    key = workspace / "runtime" / "security" / "master.key"
    key.write_bytes(key_bytes)
    (workspace / ".env").write_bytes(b"TELEGRAM_BOT_TOKEN=" + key_bytes)
    tag = uuid.uuid4().hex
    canaries = (workspace / f"pwned-{tag}", Path(f"/tmp/soulflow-escape-{tag}"),
                Path(f"/var/tmp/soulflow-escape-{tag}"), Path(f"/dev/shm/soulflow-escape-{tag}"))
    port = await listener.start()
    yield Target(canaries, (str(key), str(workspace / ".env")), key_bytes, port)
    for path in (*canaries, Path(str(canaries[0]) + ".sh")):
        path.unlink(missing_ok=True)


async def assert_harmless(output: str, target: Target, listener: Listener, mark: str) -> None:
    left = [p for p in (*target.canaries, Path(str(target.canaries[0]) + ".sh")) if p.exists()]
    assert left == [], f"wrote outside the sandbox: {left}\n{output[-2000:]}"
    assert listener.connections == 0, output[-2000:]
    assert target.key_bytes.decode() not in output
    assert await wait_none_with(mark) == [], "a process outlived the call"


def _ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"))


@pytest.mark.parametrize("technique", sorted(TECHNIQUES))
async def test_raw_code_is_contained_by_the_kernel_alone(
    technique: str, sandbox: CodeSandbox, target: Target, listener: Listener, tmp_path: Path
) -> None:
    """No AST layer, no runner: arbitrary Python straight into the bwrap layer."""
    mark = f"escape-{uuid.uuid4().hex}"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out, err = OutputPipe(64 * 1024), OutputPipe(64 * 1024)
    inner = [sys.executable, "-I", "-S", "-c", program(technique, target), mark]
    run = await sandbox.run(sandbox.python_spec(scratch), inner, RAW_LIMITS, RAW_TIMEOUT_S,
                            out, err)
    output = out.text() + err.text()
    assert run.timed_out or run.returncode is not None
    await assert_harmless(output, target, listener, mark)
    if technique not in NOT_ATTACKING:  # the attack really ran, and every step was refused
        assert "no write" in output and "no read" in output and "no socket" in output


@pytest.mark.parametrize("technique", sorted(TECHNIQUES))
async def test_corpus_through_python_repl(
    technique: str, sandbox: CodeSandbox, target: Target, listener: Listener
) -> None:
    registry = build_default_registry(sandbox=sandbox)
    workspace = Path(target.keys[0]).parents[2]
    result = await registry.execute("python_repl", {"code": program(technique, target)},
                                    _ctx(workspace))
    assert result.status in ("ok", "error")
    await assert_harmless(result.output, target, listener, SANDBOX_PROCESS_MARK)


@pytest.mark.parametrize("technique", sorted(TECHNIQUES))
async def test_corpus_through_repl_command(
    technique: str, sandbox: CodeSandbox, target: Target, listener: Listener
) -> None:
    repl = make_repl_command(sandbox)
    message = InboundMessage("local", "c1", "m1", "u1", "/repl ...")
    reply = await repl(Command("repl", program(technique, target)), message)
    assert reply.startswith("```")
    await assert_harmless(reply, target, listener, SANDBOX_PROCESS_MARK)


def test_the_corpus_is_large_enough() -> None:
    assert len(TECHNIQUES) >= 20
