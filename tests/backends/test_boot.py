"""`soulflow run` with SOULFLOW_BACKEND=redis: a Redis that cannot be used stops the boot with
one sentence and a failure status (a working one runs the daemon: test_daemon_redis.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.backends.redis_server import free_port
from tests.e2e.harness import TRACEBACK, base_env


def _run(workspace: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The boot, which must end in one sentence: never a traceback (the harness's check for
    daemons it runs, tests/e2e/harness.py, here on this process's own output)."""
    result = subprocess.run([sys.executable, "-m", "soulflow", "run"], text=True,
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                            env=base_env(workspace, SOULFLOW_BACKEND="redis", **env))
    assert not TRACEBACK.search(result.stdout + result.stderr), result.stdout + result.stderr
    return result


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("soulflow: error:")]


def test_unreachable_redis_stops_the_boot_with_one_sentence(tmp_path: Path) -> None:
    result = _run(tmp_path, REDIS_URL=f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    assert result.returncode == 1
    [line] = _error_lines(result)
    assert "REDIS_URL" in line and "unreachable" in line
    assert "s3cret" not in result.stderr + result.stdout


def test_missing_or_malformed_url_is_named(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.returncode == 1
    assert _error_lines(result) == [
        "soulflow: error: SOULFLOW_BACKEND=redis needs REDIS_URL (e.g. redis://localhost:6379/0)"]
    result = _run(tmp_path, REDIS_URL="localhost:6379")
    assert result.returncode == 1
    [line] = _error_lines(result)
    assert "REDIS_URL must be a redis://, rediss:// or unix:// URL" in line
