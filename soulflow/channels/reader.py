"""The read loop of one channel: connect with backoff, read, hand batches to the manager.

It also keeps the channel's health record, and gives up on a read that hangs (no answer
within `stall_after_s`) or keeps raising (`restart_after` failures in a row): it stops the
adapter and raises `ChannelRestart`, so the supervisor that runs this loop starts it again
after its own growing backoff. A fresh connection cures most stuck clients (a dead socket
the library did not notice, a pool in a bad state); one that does not stays visible as
`failing` with its error and restart count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from soulflow.bus.messages import InboundMessage
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.health import HealthBoard

log = logging.getLogger(__name__)

Ingest = Callable[[ChannelAdapter, list[InboundMessage]], Awaitable[object]]


class ChannelRestart(RuntimeError):
    """The channel is stalled or keeps failing; its supervisor restarts it."""


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    """When to give up on a channel's connection and start over."""

    stall_after_s: float = 120.0  # a read() that has not returned after this long is stuck
    restart_after: int = 5  # read() raised this many times in a row
    retry_delay_s: float = 1.0  # pause after a read that raised
    connect_max_delay_s: float = 300.0


async def run_channel(adapter: ChannelAdapter, ingest: Ingest, health: HealthBoard,
                      policy: ReadPolicy) -> None:
    """Connect `adapter`, then read until cancelled; raises `ChannelRestart` to be restarted.

    A platform that is down or misconfigured at boot must not stop the daemon: the error is
    logged once per attempt as one sentence and shown on the dashboard.
    """
    name = adapter.name
    health.connecting(name)
    delay = 1.0
    while True:
        try:
            await adapter.start()
            break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            health.connect_failed(name, str(exc))
            log.error("channel %s could not start: %s (retrying in %.0fs)", name, exc, delay)
            await asyncio.sleep(delay)
            delay = min(policy.connect_max_delay_s, delay * 2)
    health.connected(name)
    try:
        await _read_forever(adapter, ingest, health, policy)
    except asyncio.CancelledError:
        raise  # the daemon stops the adapters itself
    except Exception as exc:
        # a restart, or an error the loop cannot go past (e.g. the quarantine file cannot be
        # written): stop the adapter so the supervisor's next attempt starts a fresh one
        if not isinstance(exc, ChannelRestart):
            health.read_failed(name, f"{type(exc).__name__}: {exc}")
        health.restarted(name)
        try:
            await adapter.stop()
        except Exception:
            log.exception("channel %s did not stop cleanly before its restart", name)
        raise


async def _read_forever(adapter: ChannelAdapter, ingest: Ingest, health: HealthBoard,
                        policy: ReadPolicy) -> None:
    name = adapter.name
    while True:
        try:
            async with asyncio.timeout(policy.stall_after_s):
                batch = await adapter.read()
        except TimeoutError:
            health.read_failed(name, f"stalled: read() did not return within "
                                     f"{policy.stall_after_s:g}s")
            log.error("channel %s is stalled (no read returned within %.0fs); restarting it",
                      name, policy.stall_after_s)
            raise ChannelRestart(f"{name} stalled") from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures = health.read_failed(name, f"{type(exc).__name__}: {exc}")
            if failures >= policy.restart_after:
                log.error("channel %s: read failed %d times in a row (%s); restarting it",
                          name, failures, exc)
                raise ChannelRestart(f"{name} keeps failing") from exc
            log.warning("channel %s: read failed (%s: %s); retrying", name,
                        type(exc).__name__, exc)
            await asyncio.sleep(policy.retry_delay_s)
            continue
        problem = adapter.read_error
        if problem:  # the adapter handled a failure itself (and waited): still a failure
            health.read_failed(name, problem)
        else:
            health.read_ok(name)
        if batch:
            await ingest(adapter, batch)
