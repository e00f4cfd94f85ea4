"""bench/context_build.py runs on a tiny workload and prints every number it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_context_build_bench_prints_its_numbers() -> None:
    result = subprocess.run([sys.executable, "bench/context_build.py", "--repeats", "20",
                             "--zones", "30"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("(trust zones)", "reread", "cached", "chat part reread",
                  "30 chats in one second"):
        assert label in result.stdout
