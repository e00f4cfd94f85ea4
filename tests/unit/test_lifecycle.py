"""Supervised loops and keyed serial workers."""

from __future__ import annotations

import asyncio
import logging

import pytest

from soulflow.bus.workers import KeyedSerialExecutor
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


async def test_close_cancels_jobs_that_overrun_the_grace() -> None:
    executor = KeyedSerialExecutor("test", limit=1)
    executor.submit("k", lambda: asyncio.sleep(60))
    await asyncio.sleep(0)
    await executor.close(0.01)
    assert executor.active_keys == 0
    with pytest.raises(RuntimeError):
        executor.submit("k", lambda: asyncio.sleep(0))
