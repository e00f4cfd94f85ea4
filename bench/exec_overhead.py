"""What one `exec` call costs beyond the command itself: the sandbox, the masks, the quota.

    python bench/exec_overhead.py [--calls 50] [--workspace DIR] [--quick-start]

Runs ``exec true`` through the tool registry (approval rules, the sandbox, the mask scan and,
where the code has them, the disk-quota snapshot and watcher) ``--calls`` times and prints the
median and spread of the wall time per call. ``--workspace`` runs it in an existing workspace
(it must be one you may add ``chats/`` to); ``--quick-start`` builds the quick-start layout in
a temporary directory first: a clone of this repository with its ``.venv`` (hard-linked, so it
is quick and small) and ``node_modules`` inside, the layout ``scripts/run`` gives.

A second line times ``exec 'sleep 1'`` and the CPU this process spent per call (the
daemon's side: spec, snapshot, the quota watcher's checks while the command sleeps, the
settling); ``--zone-files N`` first fills the chat's folder with N files, the watcher's
worst case is a folder at its file quota.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, describe_ms  # noqa: E402
from soulflow.agent.tools.base import ChatRef, ToolContext  # noqa: E402
from soulflow.agent.tools.registry import ToolRegistry  # noqa: E402
from soulflow.agent.tools.sandbox import CodeSandbox  # noqa: E402
from soulflow.agent.tools.shell import ExecTool  # noqa: E402


def quick_start_layout(into: Path) -> Path:
    """This repository as the workspace, as `scripts/run` leaves it: sources, ``.git``,
    ``.venv`` and the diagram renderer's ``node_modules`` inside."""
    workspace = into / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(workspace)], check=True)
    venv = Path(sys.prefix)
    if venv != Path(sys.base_prefix):  # running from a venv: copy it in by hard links
        subprocess.run(["cp", "-al", str(venv), str(workspace / ".venv")], check=True)
    modules = ROOT / "soulflow" / "agent" / "diagram" / "node_modules"
    if modules.is_dir():
        subprocess.run(["cp", "-al", str(modules),
                        str(workspace / "soulflow" / "agent" / "diagram")], check=True)
    return workspace


async def measure(workspace: Path, command: str, calls: int) -> tuple[list[float], float]:
    """Wall time of each call, and this process's CPU seconds per call."""
    registry = ToolRegistry(max_output_chars=200_000)
    registry.register(ExecTool(CodeSandbox()))
    ctx = ToolContext(workspace, ChatRef("local", "bench", sender_id="u1"))
    await registry.execute("exec", {"command": "true"}, ctx)  # probe bwrap, warm caches
    timings = []
    cpu = time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        result = await registry.execute("exec", {"command": command}, ctx)
        timings.append(time.perf_counter() - start)
        if not result.ok:
            raise SystemExit(f"exec {command!r} failed: {result.output}")
    return timings, (time.process_time() - cpu) / calls


def fill_zone(workspace: Path, files: int) -> None:
    """``files`` small files in the bench chat's folder (100 per sub-folder)."""
    zone = workspace / "chats" / "local-bench"
    for i in range(files):
        folder = zone / f"d{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}").write_bytes(b"x" * 100)


def count_entries(workspace: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(workspace))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--sleep-calls", type=int, default=5)
    parser.add_argument("--workspace", type=Path)
    parser.add_argument("--quick-start", action="store_true")
    parser.add_argument("--zone-files", type=int, default=0)
    args = parser.parse_args()
    if not CodeSandbox().status().available:
        raise SystemExit(f"no working sandbox: {CodeSandbox().status().detail}")
    with tempfile.TemporaryDirectory(prefix="soulflow-bench-") as tmp:
        if args.workspace is not None:
            workspace = args.workspace.resolve()
        elif args.quick_start:
            workspace = quick_start_layout(Path(tmp))
        else:
            workspace = Path(tmp) / "workspace"
            (workspace / "notes").mkdir(parents=True)
            (workspace / "notes" / "a.txt").write_text("hello\n")
        if args.zone_files:
            fill_zone(workspace, args.zone_files)
        print(f"workspace {workspace} ({count_entries(workspace):,} entries, "
              f"{args.zone_files:,} in the chat's folder)")
        true, cpu = asyncio.run(measure(workspace, "true", args.calls))
        print(f"exec true:    {describe_ms(true)}; daemon CPU {cpu * 1000:.1f} ms per call")
        if args.sleep_calls:
            slept, cpu = asyncio.run(measure(workspace, "sleep 1", args.sleep_calls))
            print(f"exec sleep 1: {describe_ms(slept)}; daemon CPU {cpu * 1000:.1f} ms per "
                  "call")
        if args.quick_start:
            shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
