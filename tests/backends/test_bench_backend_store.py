"""bench/backend_store.py runs on a tiny workload (file, then Redis with two node processes),
and every message is run exactly once (the bench asserts the per-node counts add up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.backends.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_store_bench_runs(redis_server: RedisServer) -> None:  # needs redis-server
    result = subprocess.run([sys.executable, "bench/backend_store.py", "--messages", "60",
                             "--chats", "6", "--nodes", "2", "--fsync", "no"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("file ") for line in lines)
    assert any(line.startswith("redis 2 node(s)") for line in lines)
