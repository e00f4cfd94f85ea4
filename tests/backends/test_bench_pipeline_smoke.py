"""bench/pipeline.py (redis mode) and bench/agent_state.py run end to end on a tiny workload,
so the numbers in docs/scaling.md can be measured again; every message of the pipeline's burst
is answered in its local chat's transcript. Behaviour only, never speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.backends.redis_server import redis_server_binary

ROOT = Path(__file__).resolve().parents[2]


def test_the_pipeline_bench_runs_on_redis_and_counts_round_trips() -> None:
    redis_server_binary()  # CI: a missing redis-server fails here
    result = subprocess.run(
        [sys.executable, "bench/pipeline.py", "--backend", "redis", "--messages", "20",
         "--chats", "4", "--sequential", "3", "--in-process-model"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "throughput: 20 messages over 4 chats" in result.stdout
    # counted where the user sees them (the local chats' transcripts), not by the daemon
    assert "answered in the local chats: 20/20" in result.stdout
    [trips] = [line for line in result.stdout.splitlines()
               if line.startswith("redis round trips per message:")]
    asynchronous = float(trips.split(",")[1].split()[0])
    assert asynchronous > 0, trips  # the bus's own connections are counted too
    assert "commands/msg: eval" in result.stdout
    assert "latency added by SoulFlow" in result.stdout


def test_the_agent_state_bench_runs_on_files_and_redis() -> None:
    redis_server_binary()
    result = subprocess.run(
        [sys.executable, "bench/agent_state.py", "--turns", "10", "--chats", "2",
         "--fsync", "everysec"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "file (fsync interval)" in result.stdout
    assert "redis (AOF everysec)" in result.stdout
