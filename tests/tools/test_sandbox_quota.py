"""Disk quotas through `exec` and the real bubblewrap (issue 17, finding 11): a call over
the per-call or the per-chat quota fails with the reason, is stopped while it runs, and what
it added is not kept; what was there before stays."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from soulflow.agent.tools import shell
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.shell import ExecTool
from soulflow.config import load_settings
from tests.tools.sandbox_support import working_sandbox
from tests.waiting import until

MB = 1024 * 1024


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()


def _bounded(sandbox: CodeSandbox, workspace: Path, **quotas: str) -> CodeSandbox:
    """A sandbox with the given quota settings (the rest at their defaults)."""
    settings = load_settings(workspace, environ=quotas)
    return CodeSandbox(settings, detector=sandbox.detector, cgroups=sandbox.cgroups)


async def _exec(sandbox: CodeSandbox, workspace: Path, command: str,
                timeout_s: float = 60) -> str:
    registry = ToolRegistry(max_output_chars=200_000)
    registry.register(ExecTool(sandbox))
    ctx = ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"))
    result = await registry.execute("exec", {"command": command, "timeout_s": timeout_s}, ctx)
    assert result.status in ("ok", "error"), result
    return result.output


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _home(workspace: Path) -> Path:
    return workspace / "chats" / "local-c1"


def _apparent(root: Path) -> tuple[int, int]:
    """Bytes (apparent sizes) and entries below ``root``."""
    size = count = 0
    for current, dirs, files in os.walk(root):
        count += len(dirs) + len(files)
        size += sum(os.lstat(os.path.join(current, f)).st_size for f in files)
    return size, count


async def test_a_call_over_the_per_call_byte_quota_fails_and_keeps_nothing(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    output = await _exec(bounded, workspace, "cd; head -c 3000000 /dev/zero > big; echo after")
    assert output.startswith("Error: exec went over a disk quota: it wrote 1.0 MB, over the "
                             "per-call quota of 1 MB (EXEC_DISK_QUOTA_MB)"), output
    assert "what it added was undone" in output
    assert list(_home(workspace).iterdir()) == []


async def test_a_sparse_file_counts_by_its_apparent_size(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    output = await _exec(bounded, workspace, "cd; truncate -s 10G sparse; "
                         "truncate -s 600K a; truncate -s 600K b; ls -ls")
    assert "File too large" in output  # past the file-size limit: refused outright
    assert ("it wrote 1.2 MB, over the per-call quota of 1 MB (EXEC_DISK_QUOTA_MB)"
            in output), output  # two holes that use no block on disk
    assert _apparent(_home(workspace)) == (0, 0)


async def test_a_call_over_the_per_call_file_quota_fails_and_keeps_nothing(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_FILES="10")
    output = await _exec(bounded, workspace, "cd; mkdir d; cd d; seq 50 | xargs touch; ls | wc -l")
    assert "over the per-call quota of 10 (EXEC_DISK_QUOTA_FILES)" in output, output
    assert list(_home(workspace).iterdir()) == []


async def test_the_chat_quota_holds_across_calls(sandbox: CodeSandbox, workspace: Path) -> None:
    bounded = _bounded(sandbox, workspace, CHAT_DISK_QUOTA_MB="2", EXEC_DISK_QUOTA_MB="1")
    for name in ("one", "two"):
        output = await _exec(bounded, workspace, f"cd; head -c 900000 /dev/zero > {name}")
        assert output == "[exit code: 0]", output
    output = await _exec(bounded, workspace, "cd; head -c 900000 /dev/zero > three")
    assert ("chats/local-c1/ would hold 2.0 MB, over this chat's disk quota of 2 MB "
            "(CHAT_DISK_QUOTA_MB)") in output, output
    assert sorted(p.name for p in _home(workspace).iterdir()) == ["one", "two"]
    usage = bounded.quotas.index.get("local-c1")
    assert usage is not None and (usage.bytes, usage.files) == (1_800_000, 2)


async def test_what_was_there_before_is_kept_and_growth_cut_back(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    home = _home(workspace)
    (home / "keep").mkdir(parents=True)
    (home / "notes.txt").write_text("my notes\n")
    (home / "keep" / "data.csv").write_text("a,b\n")
    (home / "gone.txt").write_text("bye\n")
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    command = ("cd; echo more >> notes.txt; rm gone.txt; mkdir -p new/deep; "
               "echo hi > keep/extra; head -c 2000000 /dev/zero > new/deep/big")
    output = await _exec(bounded, workspace, command)
    assert "over the per-call quota of 1 MB" in output, output
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [
        "keep", "keep/data.csv", "notes.txt"]
    assert (home / "notes.txt").read_text() == "my notes\n"
    assert (home / "keep" / "data.csv").read_text() == "a,b\n"


async def test_the_watcher_stops_a_call_while_it_runs(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    """Files each under the file-size limit: only the watcher can stop this one, and it
    does so long before the loop ends (the loop would write 100 MB)."""
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    command = ("cd; for i in $(seq 200); do head -c 500000 /dev/zero > f$i; echo wrote $i; "
               "sleep 0.05; done")
    output = await _exec(bounded, workspace, command, timeout_s=120)
    assert "over the per-call quota of 1 MB (EXEC_DISK_QUOTA_MB)" in output, output
    assert "wrote 200" not in output
    assert list(_home(workspace).iterdir()) == []


async def test_the_private_tmp_counts_too(sandbox: CodeSandbox, workspace: Path) -> None:
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    output = await _exec(bounded, workspace,
                         "head -c 3000000 /dev/zero > /tmp/big; sleep 5; echo slept",
                         timeout_s=120)
    assert "over the per-call quota of 1 MB (EXEC_DISK_QUOTA_MB)" in output, output
    assert "slept" not in output


async def test_links_are_counted_not_followed(sandbox: CodeSandbox, workspace: Path) -> None:
    """A symlink to a big operator file costs its own few bytes; a hard link costs nothing
    more than the file it names."""
    (workspace / "big.bin").write_bytes(b"x" * (3 * MB))
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    output = await _exec(bounded, workspace, "cd; ln -s ../../big.bin link; "
                         "head -c 600000 /dev/zero > a; ln a b; ln a c")
    assert output == "[exit code: 0]", output
    usage = bounded.quotas.index.get("local-c1")
    assert usage is not None
    assert (usage.bytes, usage.files) == (600_000 + len("../../big.bin"), 4)


async def test_a_folder_at_its_quota_still_runs_what_adds_nothing(
    sandbox: CodeSandbox, workspace: Path
) -> None:
    """The workspace lies under /tmp here, so bwrap makes folders in the sandbox's private
    /tmp for its mount point: they are not the command's files."""
    bounded = _bounded(sandbox, workspace, CHAT_DISK_QUOTA_FILES="10")
    home = _home(workspace)
    home.mkdir(parents=True)
    for i in range(10):
        (home / f"f{i}").touch()
    output = await _exec(bounded, workspace, "cd; ls | wc -l; sleep 1; rm f0; touch new")
    assert output == "10\n[exit code: 0]", output
    assert sorted(p.name for p in home.iterdir()) == [f"f{i}" for i in range(1, 10)] + ["new"]
    output = await _exec(bounded, workspace, "cd; touch one-too-many")
    assert "over this chat's quota of 10 (CHAT_DISK_QUOTA_FILES)" in output, output


async def test_an_aborted_call_is_held_to_the_quotas_too(
    sandbox: CodeSandbox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the watcher asleep, the user's /stop ends a call that went over: what it added
    is still measured and undone."""

    async def asleep(self: object, view: object) -> str:
        await asyncio.Event().wait()
        return "never"

    monkeypatch.setattr(shell.QuotaWatcher, "__call__", asleep)
    bounded = _bounded(sandbox, workspace, EXEC_DISK_QUOTA_MB="1")
    registry = ToolRegistry(max_output_chars=200_000)
    registry.register(ExecTool(bounded))
    abort = asyncio.Event()
    ctx = ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"), abort=abort)
    command = ("cd; for i in 1 2 3; do head -c 900000 /dev/zero > f$i; done; touch ready; "
               "sleep 60")
    call = asyncio.create_task(registry.execute("exec", {"command": command}, ctx))
    await until(lambda: (_home(workspace) / "ready").exists(), timeout=60)
    abort.set()
    result = await call
    assert result.output == "Error: exec was aborted by the user"
    assert list(_home(workspace).iterdir()) == []
