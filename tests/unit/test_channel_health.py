"""Channel health and restarts: a read that keeps raising or hangs restarts the channel
through its supervisor with backoff; health records what happened, sends included."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from soulflow.channels.base import ChannelAdapter
from soulflow.channels.health import HealthBoard, LinkState
from soulflow.channels.reader import ReadPolicy, run_channel
from soulflow.contracts import InboundMessage, OutboundMessage, SendResult
from soulflow.supervisor import Supervisor
from tests.waiting import until


class ScriptedAdapter(ChannelAdapter):
    """Reads follow a mode the test switches: ok, raise, hang, or report a handled error."""

    name = "scripted"

    def __init__(self) -> None:
        self.mode = "ok"
        self.starts = 0
        self.stops = 0
        self.batches: list[list[InboundMessage]] = []

    async def start(self) -> None:
        self.starts += 1

    async def stop(self) -> None:
        self.stops += 1

    async def read(self) -> list[InboundMessage]:
        await asyncio.sleep(0.001)
        if self.mode == "raise":
            raise ConnectionError("connection reset by peer")
        if self.mode == "hang":
            await asyncio.Event().wait()
        self.read_error = "polling failed (HTTP 500) token=abc123secretvalue" \
            if self.mode == "handled" else None
        return []

    async def send(self, message: OutboundMessage) -> SendResult:
        return SendResult()


POLICY = ReadPolicy(stall_after_s=0.2, restart_after=3, retry_delay_s=0.001)


async def ignore(adapter: ChannelAdapter, batch: list[InboundMessage]) -> None:
    """An ingest that takes nothing in."""


def supervise(adapter: ChannelAdapter, health: HealthBoard,
              ingest: Callable[[ChannelAdapter, list[InboundMessage]],
                               Awaitable[None]] = ignore,
              ) -> Supervisor:
    """The adapter's read loop under a supervisor that restarts it quickly, as the runtime
    runs a channel (the caller stops the supervisor)."""
    supervisor = Supervisor(initial_backoff_s=0.01, max_backoff_s=0.05)
    supervisor.spawn("channel:scripted", lambda: run_channel(adapter, ingest, health, POLICY))
    return supervisor


async def test_a_read_that_keeps_raising_restarts_the_channel_then_it_recovers() -> None:
    adapter, health = ScriptedAdapter(), HealthBoard()
    supervisor = supervise(adapter, health)
    record = health.get("scripted")
    await until(lambda: record.state is LinkState.CONNECTED and record.last_read_at is not None)
    adapter.mode = "raise"
    await until(lambda: record.restarts >= 2 and adapter.starts >= 3)
    assert "ConnectionError: connection reset by peer" in record.last_error
    assert adapter.stops >= 2  # stopped before each new start
    adapter.mode = "ok"
    await until(lambda: record.state is LinkState.CONNECTED and record.consecutive_failures == 0)
    await supervisor.stop()


async def test_a_stalled_read_is_restarted() -> None:
    adapter, health = ScriptedAdapter(), HealthBoard()
    supervisor = supervise(adapter, health)
    record = health.get("scripted")
    await until(lambda: record.state is LinkState.CONNECTED)
    adapter.mode = "hang"
    await until(lambda: record.restarts >= 1)
    assert record.last_error.startswith("stalled: read() did not return within 0.2s")
    adapter.mode = "ok"
    await until(lambda: record.state is LinkState.CONNECTED and adapter.starts >= 2)
    await supervisor.stop()


async def test_failures_the_adapter_handles_show_redacted_and_clear_when_it_heals() -> None:
    adapter = ScriptedAdapter()
    health = HealthBoard(redact=lambda text: text.replace("abc123secretvalue", "[REDACTED]"))
    task = asyncio.create_task(run_channel(adapter, lambda a, b: None, health, POLICY))
    record = health.get("scripted")
    adapter.mode = "handled"
    await until(lambda: record.consecutive_failures >= 3)
    assert record.state is LinkState.FAILING and record.restarts == 0  # not restarted
    assert record.last_error == "polling failed (HTTP 500) token=[REDACTED]"
    adapter.mode = "ok"
    await until(lambda: record.state is LinkState.CONNECTED)
    assert record.consecutive_failures == 0
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_send_outcomes_update_the_same_record() -> None:
    now = [100.0]
    health = HealthBoard(clock=lambda: now[0])
    health.send_outcome("scripted", "HTTP 429: retry after 1")
    health.send_outcome("scripted", "HTTP 429: retry after 1")
    record = health.get("scripted")
    assert record.send_failures == 2 and record.last_error == "send: HTTP 429: retry after 1"
    now[0] = 105.0
    health.send_outcome("scripted", None)
    assert record.send_failures == 0 and record.last_send_at == 105.0
    assert record.to_dict()["status"] == "connecting"


async def test_an_ingest_error_stops_the_adapter_before_the_supervisor_starts_it_again(
        ) -> None:
    adapter, health = ScriptedAdapter(), HealthBoard()
    calls = []

    async def ingest(a: ChannelAdapter, batch: list[InboundMessage]) -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise OSError("No space left on device")  # e.g. the quarantine file

    async def read_one() -> list[InboundMessage]:
        await asyncio.sleep(0.001)
        return [InboundMessage(provider="scripted", chat_id="c", message_id=str(len(calls)),
                               sender_id="u", text="x")]

    adapter.read = read_one  # type: ignore[method-assign]
    supervisor = supervise(adapter, health, ingest)
    await until(lambda: len(calls) >= 2)
    assert adapter.stops == 1 and adapter.starts == 2
    assert health.get("scripted").restarts == 1
    assert "No space left on device" in health.get("scripted").last_error
    await supervisor.stop()
