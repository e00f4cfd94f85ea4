"""The "memory:trim" loop: freed heap goes back to the system after a burst drains."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys

import pytest

from soulflow.runtime.heap_trim import HeapTrimmer, glibc_malloc_trim

GLIBC = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"

# A burst's worth of small C allocations (100,000 × 512 bytes ≈ 50 MiB), all freed but the
# last (which pins the heap's top, as live objects do in the daemon): glibc keeps the freed
# pages until malloc_trim. Run in a child so the test process's own heap does not blur it.
BURST = r"""
import ctypes, ctypes.util
from soulflow.runtime.heap_trim import HeapTrimmer
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_kib():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
blocks = [libc.malloc(512) for _ in range(100_000)]
for block in blocks:
    ctypes.memset(block, 1, 512)
for block in blocks[:-1]:
    libc.free(block)
before = rss_kib()
trimmer = HeapTrimmer.for_this_system()
trimmer.trim_now()
print(before, rss_kib())
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_glibc_has_malloc_trim() -> None:
    assert glibc_malloc_trim() is not None
    assert HeapTrimmer.for_this_system() is not None


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_drained_burst_gives_its_heap_back() -> None:
    result = subprocess.run([sys.executable, "-c", BURST], capture_output=True, text=True,
                            timeout=60, check=True)
    before, after = (int(n) for n in result.stdout.split())
    assert before - after > 30 * 1024, (before, after)  # most of the 50 MiB went back


async def test_the_loop_trims_once_per_interval_until_cancelled() -> None:
    calls: list[int] = []
    slept: list[float] = []
    third = asyncio.Event()

    def trim(pad: int) -> int:
        calls.append(pad)
        if len(calls) == 3:
            third.set()
        return 1

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    trimmer = HeapTrimmer(trim, interval_s=60.0, sleep=sleep)
    task = asyncio.create_task(trimmer.run(), name="memory:trim")
    await asyncio.wait_for(third.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert calls[:3] == [0, 0, 0] and trimmer.trims >= 3
    assert slept[:3] == [60.0, 60.0, 60.0]  # a sleep before each trim: none at start
