"""Start something for the length of a `with`: a fake server, proxy or adapter (`running`,
`running_fixture`), several clients a test launches (`stopped_after`), a fake's standalone
process (`fake_process`) or a small aiohttp app (`serving`).

Fixtures start something, yield it and stop it even when the test fails; written out that
is six lines in every fixture of every file, so they share these.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from aiohttp import web


class Startable(Protocol):
    async def start(self) -> Any: ...

    async def stop(self) -> Any: ...


S = TypeVar("S", bound=Startable)
T = TypeVar("T")


@asynccontextmanager
async def running(service: S) -> AsyncIterator[S]:
    """`await service.start()`, yield it, and `await service.stop()` on the way out."""
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@asynccontextmanager
async def stopped_after(make: Callable[..., T], start: Callable[[T], Awaitable[Any]],
                        stop: Callable[[T], Awaitable[Any]]
                        ) -> AsyncIterator[Callable[..., Awaitable[T]]]:
    """Yields `launch(*args)`: `make(*args)`, then `start` it; everything launched is stopped
    after the block, in order, a failed start included. For fixtures that let a test start
    several clients (a restart, a second bot)."""
    launched: list[T] = []

    async def launch(*args: Any, **kwargs: Any) -> T:
        item = make(*args, **kwargs)
        launched.append(item)
        await start(item)
        return item

    try:
        yield launch
    finally:
        for item in launched:
            await stop(item)


def running_fixture(make: Callable[[], Startable]) -> Any:
    """A pytest fixture (assign it to the fixture's name) that yields `make()` started and
    stops it after the test: `fake = running_fixture(FakeSlack)`."""

    @pytest.fixture
    async def fixture() -> AsyncIterator[Startable]:
        async with running(make()) as service:
            yield service

    return fixture


REPO_ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def fake_process(module: str) -> Iterator[str]:
    """`python -m <module> --port 0` (a fake's standalone mode): yields the URL it prints as
    `READY <url>`; on the way out SIGTERM must stop it cleanly (exit code 0)."""
    command = [sys.executable, "-m", module, "--port", "0"]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("READY http://127.0.0.1:"), line
            yield line.removeprefix("READY ")
        finally:
            proc.terminate()
            code = proc.wait(timeout=10)
        assert code == 0  # SIGTERM is a clean shutdown


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """Serve an aiohttp app on a free loopback port for the block; yields the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
