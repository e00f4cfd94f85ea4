"""bench/cluster.py runs end to end on a tiny workload: the file backend and two daemons on
Redis answer every message of the burst (the bench waits for every reply and fails otherwise),
and a failover round measures a reply after the reader's SIGKILL. Behaviour, never speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.backends.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> list[str]:
    result = subprocess.run([sys.executable, "bench/cluster.py", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_the_cluster_throughput_bench_runs(redis_server: RedisServer) -> None:  # needs redis
    lines = run_bench("throughput", "--messages", "40", "--chats", "4", "--nodes", "2")
    rows = {line.split("  ")[0].strip(): line.split() for line in lines
            if line.startswith(("file ", "redis "))}
    assert set(rows) == {"file", "redis AOF always, 2 nodes"}
    assert all(row[-1] == "0" for row in rows.values())  # no duplicate replies


def test_the_failover_bench_runs(redis_server: RedisServer) -> None:
    lines = run_bench("failover", "--kills", "1", "--ttl", "3", "--nodes", "2", "--chats", "4")
    assert any(line.startswith("first reply after the kill: p50") for line in lines), lines
