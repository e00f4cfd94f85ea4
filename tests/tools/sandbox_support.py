"""Helpers for the tests of the kernel sandbox: getting one, and proving nothing survives.

Without a working bubblewrap the tests that need it are skipped with the reason the sandbox
gave; under ``CI=true`` that skip is a failure (the suite's one rule, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from soulflow.agent.tools.sandbox import CodeSandbox


def working_sandbox() -> CodeSandbox:
    """A `CodeSandbox` that works here, or skip saying why not (a failure under CI)."""
    sandbox = CodeSandbox()
    status = sandbox.status()
    if not status.available:
        pytest.skip(f"no working bubblewrap sandbox: {status.detail}")
    return sandbox


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (a pid namespace hides real pids,
    so tests tag their processes with a unique argument instead)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def wait_none_with(marker: str, within: float = 20.0) -> list[int]:
    """Wait until no process carries ``marker``; return the survivors if time runs out (a
    generous bound: markers are sleeps of 30 s or more, so only a survivor fails)."""
    deadline = time.monotonic() + within
    while True:
        left = processes_with(marker)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.05)
