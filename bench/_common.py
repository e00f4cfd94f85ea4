"""Helpers shared by the bench scripts: a fake model in its own process, stats."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def fake_model_process(*options: str) -> Iterator[str]:
    """Run tests/fakes/openai_api.py in a separate process (with its command-line `options`,
    e.g. a slow writer's); yields its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.openai_api", "--port", "0",
                             *options],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("READY "):
            raise RuntimeError(f"the fake model did not start: {line!r}")
        yield line.split(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # after hours it holds every request it was sent
            proc.kill()
            proc.wait()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def describe_ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"p50 {percentile(ms, 0.5):.2f} ms, p99 {percentile(ms, 0.99):.2f} ms, "
            f"mean {statistics.fmean(ms):.2f} ms, max {max(ms):.2f} ms (n={len(ms)})")
