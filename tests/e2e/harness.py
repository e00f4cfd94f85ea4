"""Run `soulflow` as a real subprocess against the fakes, and talk to it like a user would.

Every `Daemon` built in the test process is remembered (`BUILT`); after each test the suite
reads the logs of all of them and fails the test on a traceback it did not allow
(`Daemon.allow_traceback`): an exception the daemon logged and carried on after is still a bug
the test would otherwise never see (tests/conftest.py, `daemon_logs_have_no_tracebacks`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

BOOT_TIMEOUT_S = 30.0
#: what marks a logged exception: Python's traceback header (text or JSON log), or asyncio's
#: report of a task that died with nobody awaiting it
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|exception was never retrieved")
#: a line that starts a log record (continuation lines, a traceback's, do not)
_RECORD_START = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}|\{|===== )")


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.02,
             what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def base_env(workspace: Path, **overrides: str) -> dict[str, str]:
    """A clean environment: nothing from the developer's shell leaks into the daemon."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "SYSTEMROOT")}
    env.update({
        "SOULFLOW_WORKSPACE": str(workspace),
        "DASHBOARD_PORT": "0",
        "PROVIDER_RETRY_BASE_MS": "10",
        "OUTBOUND_RETRY_BASE_MS": "20",
        "JOURNAL_FSYNC_INTERVAL_MS": "100",
        "SHUTDOWN_GRACE_S": "3",
        "LOG_LEVEL": "info",
        "LOCAL_MODEL": "off",  # hermetic, even where soulflow[local] is installed
        "PYTHONUNBUFFERED": "1",
    })
    env.update(overrides)
    return env


@dataclass
class Daemon:
    workspace: Path
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    python: str = sys.executable  # the interpreter `soulflow run` runs under
    cwd: Path | None = None  # where it is started (None: the test's own directory)
    url: str = ""
    starts: int = 0
    #: start the daemon with this soft RLIMIT_NOFILE (as `ulimit -Sn` would), else inherited
    soft_open_files: int | None = None
    _log_handles: list[Any] = field(default_factory=list)
    # one client for every call: building one costs ~0.1 s (it loads the CA bundle)
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))
    _allowed_tracebacks: list[tuple[str, ...]] = field(default_factory=list)
    _log_checked: int = 0  # bytes of the log already looked at for tracebacks

    def __post_init__(self) -> None:
        BUILT.append(self)

    # -- process ---------------------------------------------------------------------------

    def start(self) -> Daemon:
        self.starts += 1
        handle = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self._log_handles.append(handle)
        handle.write(f"\n===== start {self.starts} =====\n".encode())
        handle.flush()
        info_path = self.workspace / "runtime" / "daemon.json"
        info_path.unlink(missing_ok=True)
        self.proc = subprocess.Popen(self.command(), env=self.env,
                                     stdout=handle, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.cwd)

        def ready() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            try:
                url = json.loads(info_path.read_text())["url"]
                ok = self._http.get(url + "/healthz", timeout=2).status_code == 200
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                return None
            return url if ok else None

        self.url = wait_for(ready, BOOT_TIMEOUT_S, what="the daemon to be ready")
        return self

    def command(self) -> list[str]:
        if self.soft_open_files is None:
            return [self.python, "-m", "soulflow", "run"]
        return [self.python, "-c",
                "import resource, runpy, sys\n"
                "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({self.soft_open_files}, hard))\n"
                "sys.argv = ['soulflow', 'run']\n"
                "runpy.run_module('soulflow', run_name='__main__', alter_sys=True)\n"]

    def open_fds(self) -> int:
        """The daemon process's open file descriptors now."""
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for handle in self._log_handles:
            handle.close()
        self._http.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def allow_traceback(self, *parts: str) -> None:
        """A test that makes the daemon log an exception on purpose names it: a log record
        holding every one of `parts` (the message, the exception line...) is let through."""
        self._allowed_tracebacks.append(parts)

    def allow_supervised_crash_on_redis_away(self) -> None:
        """For tests that take Redis away on purpose: a supervised loop (heartbeat, cron...)
        that hit the dead connection before its lease check stopped it is restarted by the
        Supervisor, which logs the crash with its traceback."""
        self.allow_traceback("soulflow.supervisor: loop ", " crashed; restarting in ",
                             "redis.exceptions.ConnectionError")

    def new_tracebacks(self) -> list[str]:
        """Log records with a traceback written since the last call, except allowed ones."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._log_checked)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._log_checked += len(data)
        records: list[list[str]] = []
        for line in data.decode(errors="replace").splitlines():
            if _RECORD_START.match(line) or not records:
                records.append([line])
            else:
                records[-1].append(line)
        found = ["\n".join(lines) for lines in records if TRACEBACK.search("\n".join(lines))]
        return [record for record in found
                if not any(all(part in record for part in parts)
                           for parts in self._allowed_tracebacks)]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- API -------------------------------------------------------------------------------

    @property
    def headers(self) -> dict[str, str]:
        token = self.env.get("DASHBOARD_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def api(self, method: str, path: str, *, headers: dict[str, str] | None = None,
            **kwargs: Any) -> httpx.Response:
        return self._http.request(method, self.url + path,
                                  headers={**self.headers, **(headers or {})}, **kwargs)

    def state(self) -> dict[str, Any]:
        return self.api("GET", "/api/state").json()

    def say(self, text: str, chat_id: str = "test") -> str:
        response = self.api("POST", "/api/chat", json={"chat_id": chat_id, "text": text})
        assert response.status_code == 202, response.text
        return response.json()["message_id"]

    def transcript(self, chat_id: str = "test") -> list[dict[str, Any]]:
        return self.api("GET", f"/api/chat/{chat_id}/messages",
                        params={"after": -1}).json()["messages"]

    def replies(self, chat_id: str = "test") -> list[dict[str, Any]]:
        return [m for m in self.transcript(chat_id) if m["role"] == "assistant"]

    def wait_reply(self, message_id: str, chat_id: str = "test",
                   timeout: float = 20.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:  # whole: not a streamed reply still growing
            return next((m for m in self.replies(chat_id) if m.get("reply_to") == message_id
                         and not m.get("partial")), None)
        return wait_for(find, timeout, what=f"a reply to {message_id}")

    def cli(self, *args: str, input: bytes | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "soulflow", *args], env=self.env,
                              input=input, capture_output=True, timeout=timeout)


#: every Daemon built in this process, in order (the suite's teardown check reads their logs)
BUILT: list[Daemon] = []


@contextmanager
def daemon_factory(tmp_path: Path, llm_url: str,
                   **defaults: str) -> Iterator[Callable[..., Daemon]]:
    """Build (not start) daemons on one workspace, wired to the fake model at `llm_url` with
    `defaults` in their environment (a call's own settings win); all closed on the way out."""
    daemons: list[Daemon] = []

    def factory(**env: str) -> Daemon:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        settings = {"PROVIDER": "phi4_local", "PHI4_BASE_URL": llm_url,
                    "PHI4_MODEL": "fake-model", **defaults, **env}
        daemon = Daemon(workspace, base_env(workspace, **settings),
                        tmp_path / f"daemon-{len(daemons)}.log")
        daemons.append(daemon)
        return daemon

    try:
        yield factory
    finally:
        for daemon in daemons:
            daemon.close()
