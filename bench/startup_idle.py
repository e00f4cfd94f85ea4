"""Cold start (`soulflow run` to /healthz 200) and idle cost (CPU, RSS) of the daemon.

    python bench/startup_idle.py [--starts 5] [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent


def start_daemon(workspace: Path) -> tuple[subprocess.Popen[bytes], float]:
    env = {**os.environ, "SOULFLOW_WORKSPACE": str(workspace), "DASHBOARD_PORT": "0",
           "LOG_LEVEL": "warning"}
    info = workspace / "runtime" / "daemon.json"
    info.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "soulflow", "run"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            url = json.loads(info.read_text())["url"]
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, time.perf_counter() - start
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        if proc.poll() is not None:
            raise RuntimeError("the daemon exited during start-up")
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        times = []
        for _ in range(args.starts):
            proc, elapsed = start_daemon(workspace)
            times.append(elapsed)
            proc.terminate()
            proc.wait(20)
        print(f"ready (run -> /healthz 200): median {statistics.median(times):.3f} s, "
              f"min {min(times):.3f} s, max {max(times):.3f} s (n={len(times)})")

        proc, _ = start_daemon(workspace)
        process = psutil.Process(proc.pid)
        time.sleep(2)  # let start-up work settle before measuring idle
        cpu_before = sum(process.cpu_times()[:2])
        time.sleep(args.idle_seconds)
        cpu = sum(process.cpu_times()[:2]) - cpu_before
        rss_mb = process.memory_info().rss / 2**20
        print(f"idle for {args.idle_seconds:.0f} s: CPU {cpu:.3f} s "
              f"({100 * cpu / args.idle_seconds:.2f}% of one core), RSS {rss_mb:.1f} MB")
        proc.terminate()
        proc.wait(20)


if __name__ == "__main__":
    main()
