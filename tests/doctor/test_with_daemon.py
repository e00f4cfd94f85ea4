"""`soulflow doctor` next to a running daemon: the dashboard port it holds is fine, and the
doctor reads the same workspace without disturbing it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.e2e.harness import Daemon, base_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_port_held_by_our_daemon_is_ok(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    port = free_port()
    daemon = Daemon(workspace, base_env(workspace, DASHBOARD_PORT=str(port)),
                    tmp_path / "daemon.log")
    try:
        daemon.start()
        done = subprocess.run([sys.executable, "-m", "soulflow", "doctor"], env=daemon.env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert daemon.alive()
    finally:
        daemon.close()
    lines = {line.split()[1] + " " + line.split()[2]: line for line in done.stdout.splitlines()
             if line.startswith(("ok ", "warn", "FAIL", "skip"))}
    port_line = lines["dashboard port"]
    assert port_line.startswith("ok ") and "held by this workspace's daemon" in port_line
    assert "ready" in port_line
    assert done.returncode == 0, done.stdout
