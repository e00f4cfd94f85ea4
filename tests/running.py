"""`running(x)`: start a fake server, proxy or adapter for the length of an `async with`.

Fixtures start something, yield it and stop it even when the test fails; written out that
is six lines in every fixture of every file, so they share this one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import pytest


class Startable(Protocol):
    async def start(self) -> Any: ...

    async def stop(self) -> Any: ...


S = TypeVar("S", bound=Startable)


@asynccontextmanager
async def running(service: S) -> AsyncIterator[S]:
    """`await service.start()`, yield it, and `await service.stop()` on the way out."""
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


def running_fixture(make: Callable[[], Startable]) -> Any:
    """A pytest fixture (assign it to the fixture's name) that yields `make()` started and
    stops it after the test: `fake = running_fixture(FakeSlack)`."""

    @pytest.fixture
    async def fixture() -> AsyncIterator[Startable]:
        async with running(make()) as service:
            yield service

    return fixture
