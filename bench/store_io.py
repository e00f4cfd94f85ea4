"""How long the small persisted stores hold the event loop per write.

A Telegram batch commits its update offset (`ChannelState.update`), an approval prompt that
was sent is remembered (`FileApprovalMap.remember`); both run on the event loop. This bench
times each call on the calling thread (what the loop waits for), the event loop's worst lag
while a ticker runs beside the writes, and the time until everything is on disk (`flush`).
The files live on the workspace's disk (not tmpfs), so an fsync costs what it costs there.

    python bench/store_io.py [--writes 300] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import describe_ms  # noqa: E402
from soulflow.backends.file.approvals import FileApprovalMap  # noqa: E402
from soulflow.channels.state import ChannelState  # noqa: E402


async def _ticker(stop: asyncio.Event, lags: list[float], period: float = 0.001) -> None:
    """Wakes every `period`; the lateness of each wake-up is the loop's lag."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + period
        await asyncio.sleep(period)
        lags.append(max(0.0, loop.time() - due))


async def _measure(label: str, writes: int, write: Callable[[int], None],
                   flush: Callable[[], None]) -> None:
    stop, lags, calls = asyncio.Event(), [], []
    ticker = asyncio.create_task(_ticker(stop, lags), name="bench-ticker")
    began = time.perf_counter()
    for i in range(writes):
        start = time.perf_counter()
        write(i)
        calls.append(time.perf_counter() - start)
        await asyncio.sleep(0)  # a batch's other work: let the ticker run between commits
    on_loop = time.perf_counter() - began
    await asyncio.to_thread(flush)
    durable = time.perf_counter() - began
    stop.set()
    await ticker
    print(f"{label}: per call on the loop {describe_ms(calls)}")
    print(f"{label}: loop lag worst {max(lags) * 1000:.2f} ms over {len(lags)} ticks; "
          f"{writes} writes took {on_loop * 1000:.0f} ms on the loop, "
          f"{durable * 1000:.0f} ms until flushed to disk")


async def main(writes: int, directory: Path) -> None:
    state = ChannelState(directory / "cursors" / "telegram.json")
    await _measure("ChannelState.update", writes,
                   lambda i: state.update({"offset": 1000 + i, "primed": True}),
                   getattr(state, "flush", lambda: None))
    approvals = FileApprovalMap(directory / "approval_messages.json")
    await _measure("FileApprovalMap.remember", writes,
                   lambda i: approvals.remember("telegram:42", [str(i)], f"run_{i}", f"ap_{i}"),
                   getattr(approvals, "flush", lambda: None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a temp dir beside the workspace)")
    args = parser.parse_args()
    base = args.dir or Path.cwd()
    with tempfile.TemporaryDirectory(prefix=".bench-store-io-", dir=base) as tmp:
        asyncio.run(main(args.writes, Path(tmp)))
