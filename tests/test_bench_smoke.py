"""bench/platform_burst.py runs end to end on a tiny workload and every message is answered where
the user would see it: the platform fake received a reply in the message's chat that answers it
(the fake model echoes each message it is asked about, folded ones included), not merely the
daemon's journal saying so.

A real run: the fake in its own process, the fake model in another, `soulflow run` as a
subprocess. It asserts behaviour (completion, nothing dead-lettered), never speed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
def test_platform_burst_answers_a_tiny_burst(platform: str) -> None:
    result = subprocess.run(
        [sys.executable, "bench/platform_burst.py", "--platform", platform, "--messages", "40",
         "--chats", "4", "--runs", "1", "--stall", "30", "--poll", "0.2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.split("summary", 1)[1]
    assert f"{platform}: 1/1 runs answered all 40 at the platform" in summary
    assert "dead letters max 0" in summary
    table = result.stdout.split("summary", 1)[0].strip().splitlines()
    header, last = table[-2].split(), table[-1].split()
    assert last[header.index("delivered")] == "40/40"  # counted at the platform fake
    assert last[header.index("journal")] == "40/40"  # and the daemon agrees
    assert last[-1] == "done"


def test_first_reply_bench_times_a_reply_on_every_platform() -> None:
    """bench/first_reply.py: one run per platform, each first and steady mention answered
    at the platform (it fails with the platform named if one is not)."""
    result = subprocess.run(
        [sys.executable, "bench/first_reply.py", "--runs", "1", "--timeout", "60"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split()[0] for line in result.stdout.strip().splitlines()[1:]]
    assert rows == ["telegram", "slack", "discord"]
