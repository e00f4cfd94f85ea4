"""What one file-tool call costs: ``read_file`` (and ``write_file``, ``list_dir``) through the
registry, and the safe open beneath the workspace on its own.

Each tool call goes the whole way a model's call goes - schema check, approval rule, the zone
judgement, the worker-thread hop, the open and the read - on a 4 KB file in the chat's own
folder (``chats/local-c1/``), sequentially, after a warm-up. The second table is the open
and read alone: a plain ``open()`` against `Beneath.read_bytes` (``openat2`` without links
where the kernel has it, else one ``O_NOFOLLOW`` open per component). Run it on two commits
to compare them; the workspace is a temporary directory on the default temp disk.

    python bench/file_tools.py [--calls 2000] [--depth 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile  # noqa: E402
from soulflow.agent.tools import build_default_registry  # noqa: E402
from soulflow.agent.tools.base import ChatRef, ToolContext  # noqa: E402
from soulflow.storage.beneath import Beneath, openat2_available  # noqa: E402

OWN = "chats/local-c1"


def describe_us(samples: list[float]) -> str:
    us = [s * 1e6 for s in samples]
    return (f"p50 {percentile(us, 0.5):7.1f} µs  p99 {percentile(us, 0.99):7.1f} µs  "
            f"mean {statistics.fmean(us):7.1f} µs  (n={len(us)})")


async def time_calls(call: Callable[[], Awaitable[object]], calls: int) -> list[float]:
    for _ in range(min(200, calls)):  # warm-up: imports, caches, the thread pool
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def time_sync(call: Callable[[], object], calls: int) -> list[float]:
    for _ in range(min(200, calls)):
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=3,
                        help="folders between the chat's folder and the file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        folder = "/".join(f"d{i}" for i in range(args.depth))
        rel = f"{OWN}/{folder}/notes.md" if folder else f"{OWN}/notes.md"
        (workspace / rel).parent.mkdir(parents=True)
        (workspace / rel).write_text("x" * 4095 + "\n")
        registry = build_default_registry()
        # approved: the same path on a commit where the chat's folder still asked approval
        ctx = ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"), approved=True)

        async def read() -> object:
            result = await registry.execute("read_file", {"path": rel}, ctx)
            assert result.ok, result.output
            return result

        async def write() -> object:
            result = await registry.execute(
                "write_file", {"path": f"{OWN}/out.md", "content": "y" * 4096}, ctx)
            assert result.ok, result.output
            return result

        async def listing() -> object:
            result = await registry.execute("list_dir", {"path": OWN}, ctx)
            assert result.ok, result.output
            return result

        print(f"file tools on {rel} (4 KB), {args.calls} sequential calls each; "
              f"openat2: {'yes' if openat2_available() else 'no (component-wise fallback)'}")
        for label, call in (("read_file", read), ("write_file", write), ("list_dir", listing)):
            print(f"  {label:<11} {describe_us(await time_calls(call, args.calls))}")
        beneath = Beneath(workspace)
        target = workspace / rel
        print("the open and read alone:")
        print(f"  {'open()':<11} {describe_us(time_sync(target.read_bytes, args.calls))}")
        print(f"  {'Beneath':<11} "
              f"{describe_us(time_sync(lambda: beneath.read_bytes(rel), args.calls))}")


if __name__ == "__main__":
    asyncio.run(main())
