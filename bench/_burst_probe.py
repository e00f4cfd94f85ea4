"""What the platform bench observes: a fake in its own process, the daemon's journals, and the
daemon process itself (CPU, RSS, file descriptors, sockets) through psutil."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench._journal_tail import JournalTail

ROOT = Path(__file__).resolve().parent.parent
#: Journal statuses that mean "no answer was produced for this message".
UNANSWERED = frozenset({"failed", "ignored", "refused", "quarantined"})


class FakeHostProcess:
    """bench/_fake_host.py in a child process; :meth:`call` sends one JSON command."""

    def __init__(self, platform: str, chats: int, *, limits: bool = True) -> None:
        command = [sys.executable, "-m", "bench._fake_host", "--platform", platform,
                   "--chats", str(chats)]
        if not limits:
            command.append("--no-limits")
        self.platform = platform
        self._lock = threading.Lock()  # one command at a time on the pipe (the soak's threads)
        self.proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY "):
            self.close()
            raise RuntimeError(f"the {platform} fake did not start: {line!r}")
        self.env: dict[str, str] = json.loads(line.split(" ", 1)[1])["env"]

    def call(self, cmd: str, **params: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps({"cmd": cmd, **params}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.platform} fake exited (code {self.proc.poll()})")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"{self.platform} fake: {reply['error']}")
        return reply["result"]

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # EOF: the host stops its fake and exits
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class JournalCount:
    """Inbound messages the daemon journaled, and how each one ended (by key, so a compaction
    that rewrites the file counts nothing twice)."""

    path: Path
    received: set[str] = field(default_factory=set)
    done: dict[str, str] = field(default_factory=dict)
    _tail: JournalTail | None = None

    def refresh(self) -> None:
        self._tail = self._tail or JournalTail(self.path)
        for record in self._tail.new_records():
            if record.get("op") == "in" and isinstance(record.get("msg"), dict):
                key = record["msg"].get("key") or _message_key(record["msg"])
                self.received.add(key)
            elif record.get("op") == "done" and isinstance(record.get("key"), str):
                self.done[record["key"]] = str(record.get("status"))

    @property
    def answered(self) -> int:
        return sum(1 for status in self.done.values() if status not in UNANSWERED)

    def statuses(self) -> dict[str, int]:
        return dict(Counter(self.done.values()))


def _message_key(msg: dict[str, Any]) -> str:
    return f"{msg.get('provider')}:{msg.get('chat_id')}:{msg.get('message_id')}"


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())
    except FileNotFoundError:
        return 0


def dead_letters(workspace: Path) -> dict[str, int]:
    dlq = workspace / "runtime" / "dlq"
    return {"outbound": count_lines(dlq / "outbound.jsonl"),
            "inbound": count_lines(dlq / "inbound.jsonl")}


@dataclass
class ProcessSample:
    rss_mib: float
    fds: int
    connections: int


class DaemonProbe:
    """CPU (user+sys) between :meth:`mark` and :meth:`cpu_s`, and peaks of RSS, fds, sockets."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self._cpu_mark = 0.0
        self.peak = ProcessSample(0.0, 0, 0)

    def _cpu(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def mark(self) -> None:
        self._cpu_mark = self._cpu()

    def cpu_s(self) -> float:
        return self._cpu() - self._cpu_mark

    def sample(self) -> ProcessSample:
        with self.proc.oneshot():
            rss = self.proc.memory_info().rss / 2**20
            fds = self.proc.num_fds()
            connections = len(self.proc.net_connections(kind="inet"))
        now = ProcessSample(rss, fds, connections)
        self.peak = ProcessSample(max(self.peak.rss_mib, rss), max(self.peak.fds, fds),
                                  max(self.peak.connections, connections))
        return now


def daemon_env(workspace: Path, model_url: str, platform_env: dict[str, str],
               **overrides: str) -> dict[str, str]:
    """The daemon's own defaults (pacing, retries, fsync) plus what makes it hermetic."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")}
    env.update({"SOULFLOW_WORKSPACE": str(workspace), "DASHBOARD_PORT": "0",
                "LOCAL_MODEL": "off", "PROVIDER": "phi4_local", "PHI4_BASE_URL": model_url,
                "PHI4_MODEL": "fake-model", "PYTHONUNBUFFERED": "1", "SHUTDOWN_GRACE_S": "5",
                **platform_env, **overrides})
    return env


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
