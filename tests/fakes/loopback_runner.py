"""Ways to run a fake outside the test's own event loop.

* :class:`FakeServerThread` runs a fake on a private event loop in a daemon thread, so a
  synchronous test can drive a daemon subprocess against it and still inject events.
* :func:`run_cli` backs ``python -m tests.fakes.<name> --port 0`` for manual use and for
  harnesses that want the fake as its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import copy
import inspect
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Self, TypeVar

from tests.fakes.loopback_base import FakeServerBase

F = TypeVar("F", bound=FakeServerBase)
R = TypeVar("R")


class FakeServerThread(Generic[F]):
    """Context manager that serves a fake from a background thread.

    All interaction with the fake must happen on its loop; :meth:`call` marshals a
    function call there and returns a deep copy of the result so the caller never shares
    mutable state with the server thread.
    """

    call_timeout = 60.0

    def __init__(self, factory: Callable[[], F], host: str = "127.0.0.1", port: int = 0):
        self._factory = factory
        self._host, self._port = host, port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._fake: F | None = None
        self.url = ""

    @property
    def fake(self) -> F:
        """The fake itself: only touch it on its loop (via :meth:`call` / predicates)."""
        if self._fake is None:
            raise RuntimeError("fake server thread is not running")
        return self._fake

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the thread and block until the server accepts connections."""
        self._thread = threading.Thread(target=self._run, name="fake-api-server", daemon=True)
        self._thread.start()
        self._ready.wait(self.call_timeout)
        if self._error is not None:
            raise RuntimeError("fake server failed to start") from self._error
        if not self.url:
            raise RuntimeError("fake server did not start in time")

    def stop(self) -> None:
        """Stop the server and join the thread."""
        if self._loop is not None and self._stop_event is not None and self._thread:
            self._loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(self.call_timeout)
        self._loop = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced to start() via _error
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        fake = self._fake = self._factory()
        self.url = await fake.start(self._host, self._port)
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await fake.stop()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the fake's loop (awaiting it if async)."""
        if self._loop is None:
            raise RuntimeError("fake server thread is not running")

        async def invoke() -> Any:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return copy.deepcopy(result)

        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            invoke(), self._loop
        )
        return future.result(self.call_timeout)

    def snapshot(self, attribute: str) -> Any:
        """Deep copy of a fake attribute, read on the server loop."""
        return self.call(lambda: getattr(self.fake, attribute))

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Block until ``predicate()`` holds; it is evaluated on the server loop."""
        self.call(self.fake.wait_for, predicate, timeout)


class Snapshot:
    """On a thread wrapper, ``messages = Snapshot()`` reads as
    ``wrapper.snapshot("messages")``: a deep copy of the fake's attribute of that name, read
    on the server loop."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = name

    def __get__(self, wrapper: FakeServerThread[Any], owner: type | None = None) -> Any:
        return wrapper.snapshot(self.attribute)


def run_cli(
    factory: Callable[[argparse.Namespace], FakeServerBase],
    description: str,
    argv: Sequence[str] | None = None,
    configure: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """Serve a fake until SIGINT/SIGTERM, printing ``READY <url>`` once listening."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    if configure is not None:
        configure(parser)
    args = parser.parse_args(argv)

    async def main() -> None:
        fake = factory(args)
        url = await fake.start(args.host, args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"READY {url}", flush=True)
        try:
            await stop.wait()
        finally:
            await fake.stop()

    asyncio.run(main())
    sys.stdout.flush()
