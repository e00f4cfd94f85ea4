"""Supervised loops, keyed serial workers, and the runtime's one exit stack: services stop in
the reverse of their start, and a start that fails unwinds what had started."""

from __future__ import annotations

import ast
import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soulflow.config import Settings, load_settings
from soulflow.conversation.serial import KeyedSerialExecutor
from soulflow.dashboard.errors import DashboardError
from soulflow.runtime import DAEMON_INFO_FILE, Runtime, create_runtime
from soulflow.storage.lock import WorkspaceLock
from soulflow.supervisor import Supervisor


async def test_a_crashing_loop_is_restarted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []
    healthy = asyncio.Event()

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("boom")
        healthy.set()
        await asyncio.Event().wait()

    supervisor = Supervisor(initial_backoff_s=0.001, max_backoff_s=0.002)
    with caplog.at_level(logging.ERROR):
        supervisor.spawn("flaky", flaky)
        await asyncio.wait_for(healthy.wait(), 5)
    status = supervisor.status()[0]
    assert status["restarts"] == 2 and status["running"] and "boom" in status["last_error"]
    assert "loop flaky crashed" in caplog.text
    await supervisor.stop(1)
    assert supervisor.status() == []


async def test_stop_cancels_every_loop() -> None:
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.append(name)

    supervisor = Supervisor()
    for name in ("a", "b"):
        supervisor.spawn(name, lambda n=name: forever(n))
    await asyncio.sleep(0)
    await supervisor.stop(1)
    assert sorted(cancelled) == ["a", "b"]
    with pytest.raises(ValueError):
        supervisor.spawn("x", lambda: forever("x"))
        supervisor.spawn("x", lambda: forever("x"))
    await supervisor.stop(1)


async def test_keyed_executor_is_serial_per_key_and_bounded_overall() -> None:
    executor = KeyedSerialExecutor("test", limit=2)
    order: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    running = 0
    peak = 0

    async def job(key: str, i: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        order[key].append(i)
        running -= 1

    for i in range(10):
        for key in order:
            executor.submit(key, lambda k=key, n=i: job(k, n))
    assert await executor.join(5)
    assert all(values == list(range(10)) for values in order.values())
    assert peak == 2


async def test_a_failing_job_does_not_stop_its_key(caplog: pytest.LogCaptureFixture) -> None:
    executor = KeyedSerialExecutor("test", limit=1)
    done: list[int] = []

    async def bad() -> None:
        raise ValueError("nope")

    async def good() -> None:
        done.append(1)

    executor.submit("k", bad)
    executor.submit("k", good)
    assert await executor.join(5)
    assert done == [1] and "a job for k failed" in caplog.text


async def test_stop_cancels_jobs_that_overrun_the_grace() -> None:
    executor = KeyedSerialExecutor("test", limit=1)
    executor.submit("k", lambda: asyncio.sleep(60))
    await asyncio.sleep(0)
    await executor.stop(0.01)
    assert executor.active_keys == 0
    with pytest.raises(RuntimeError):
        executor.submit("k", lambda: asyncio.sleep(0))


async def test_cancel_stops_the_named_loops_only() -> None:
    """A service stops the loops it started and no others (Supervisor.cancel)."""
    supervisor = Supervisor()
    for name in ("mine", "also-mine", "theirs"):
        supervisor.spawn(name, lambda: asyncio.Event().wait())
    await asyncio.sleep(0)
    await supervisor.cancel(["mine", "also-mine", "never-started"], 1)
    assert supervisor.names() == ["theirs"]
    await supervisor.stop(1)
    assert supervisor.names() == []


# -- the runtime: one exit stack ---------------------------------------------------------------


class RecordingFrontEnd:
    """A dashboard stand-in: records its start and stop, or fails to start like a busy port."""

    host = "127.0.0.1"
    bound_port: int | None = None

    def __init__(self, calls: list[str], *, fail: bool = False) -> None:
        self.calls, self.fail = calls, fail

    async def start(self) -> None:
        self.calls.append("start dashboard")
        if self.fail:
            raise DashboardError("cannot listen on 127.0.0.1:1 (in use)")
        self.bound_port = 1

    async def stop(self) -> None:
        self.calls.append("stop dashboard")


def record(calls: list[str], runtime: Runtime) -> None:
    """Log the start and the stop of the runtime's services, in the order they come."""
    def spy(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(label)
            return fn(*args, **kwargs)
        return call

    for name, part, start, stop in (("backend", runtime.backend, "start", "stop"),
                                    ("bus", runtime.bus, "start", "stop"),
                                    ("conversation", runtime.conversation, "resume_pending",
                                     "stop"),
                                    ("tasks", runtime.task_services, "start", "stop"),
                                    ("background", runtime.background, "start", "stop")):
        setattr(part, start, spy(f"start {name}", getattr(part, start)))
        setattr(part, stop, spy(f"stop {name}", getattr(part, stop)))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(tmp_path, {"DASHBOARD_ENABLED": "false", "LOG_LEVEL": "warning",
                                    "HEARTBEAT_INTERVAL": "0"})


async def test_services_stop_in_the_reverse_of_their_start(settings: Settings) -> None:
    calls: list[str] = []
    runtime = create_runtime(settings, lambda built: RecordingFrontEnd(calls))
    record(calls, runtime)
    inputs_when_draining: list[str] = []
    drain = runtime.conversation.stop

    async def conversation_stop(timeout: float) -> None:
        inputs_when_draining.extend(runtime.supervisor.names())
        await drain(timeout)

    runtime.conversation.stop = conversation_stop  # type: ignore[method-assign]
    await runtime.start()
    assert runtime.ready and "inbound:claim" in runtime.supervisor.names()
    started, calls[:] = list(calls), []
    await runtime.stop()
    assert started == ["start backend", "start bus", "start conversation", "start tasks",
                       "start background", "start dashboard"]
    assert calls == [f"stop {label.removeprefix('start ')}" for label in reversed(started)]
    # the readers, the claim loop, cron, heartbeat and ops stopped before the answers in
    # flight were let finish; only the embedded model's watcher (if any) still keeps the model
    # up for them
    assert set(inputs_when_draining) <= {"local-model"}
    assert runtime.supervisor.names() == []
    assert not (settings.runtime_dir / DAEMON_INFO_FILE).exists()
    assert not WorkspaceLock(settings.runtime_dir / "daemon.lock").is_locked_by_other()


async def test_a_failed_start_unwinds_what_had_started(settings: Settings) -> None:
    """The dashboard's port in use: everything started before it stops again, in reverse,
    the workspace is free, and the start's own error is raised."""
    calls: list[str] = []
    runtime = create_runtime(settings, lambda built: RecordingFrontEnd(calls, fail=True))
    record(calls, runtime)
    before = asyncio.all_tasks()
    with pytest.raises(DashboardError, match="cannot listen"):
        await runtime.start()
    assert calls == ["start backend", "start bus", "start conversation", "start tasks",
                     "start background", "start dashboard", "stop dashboard",
                     "stop background", "stop tasks", "stop conversation", "stop bus",
                     "stop backend"]
    assert not runtime.ready and runtime.supervisor.names() == []
    assert asyncio.all_tasks() <= before  # no loop, writer or worker left running
    assert not (settings.runtime_dir / DAEMON_INFO_FILE).exists()
    assert not WorkspaceLock(settings.runtime_dir / "daemon.lock").is_locked_by_other()
    await runtime.stop()  # as `run_until_signal` does after a failed start: nothing left
    assert calls[-1] == "stop backend"


# -- one verb for shutdown ---------------------------------------------------------------------

#: where a library's interface names the shutdown: python-telegram-bot's `BaseRequest.shutdown`
LIBRARY_SHUTDOWNS = {("soulflow.channels.telegram.http", "shutdown")}


def shutdown_verb_violations(root: Path) -> list[str]:
    """docs/development.md, "Lifecycle": what has a `start()` ends with `stop()`, never
    `close()`; no `aclose` or `shutdown` of our own."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {item.name for item in node.body
                       if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
            where = f"{module}.{node.name}"
            if "start" in methods and "stop" not in methods:
                wrong.append(f"{where}: start() without stop()"
                             f"{' (it has close())' if 'close' in methods else ''}")
            elif "start" in methods and "close" in methods:
                wrong.append(f"{where}: start() with stop() and close(): one end")
            for verb in ("aclose", "shutdown"):
                if verb in methods and (module, verb) not in LIBRARY_SHUTDOWNS:
                    wrong.append(f"{where}: {verb}() (a service stops, a resource closes)")
    return wrong


def test_one_verb_for_shutdown() -> None:
    root = Path(__file__).resolve().parents[2] / "soulflow"
    assert shutdown_verb_violations(root) == []
