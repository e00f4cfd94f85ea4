"""The read loop of one channel: connect with backoff, read, hand batches to the intake.

It also keeps the channel's health record, and gives up on a read that hangs (no answer
within `stall_after_s`) or keeps raising (`restart_after` failures in a row): it stops the
adapter and raises `ChannelRestart`, so the supervisor that runs this loop starts it again
after its own growing backoff. A fresh connection cures most stuck clients (a dead socket
the library did not notice, a pool in a bad state); one that does not stays visible as
`failing` with its error and restart count.

When several daemons share a platform account (redis backend) only one may read it: the loop
connects the adapter for sending on every node, then waits for the account's lease and reads
only during this node's terms as leader; the moment a term ends (lease lost, or a cursor write
refused under it) an in-flight read is abandoned and the read side stopped. The channel shows
`standby` meanwhile, which is not a failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from soulflow.channels.base import ChannelAdapter, ChannelError
from soulflow.channels.health import HealthBoard
from soulflow.channels.leadership import AccountLeadership
from soulflow.contracts import InboundMessage

if TYPE_CHECKING:
    from soulflow.backends.base import Lease

log = logging.getLogger(__name__)

T = TypeVar("T")
Ingest = Callable[[ChannelAdapter, list[InboundMessage]], Awaitable[object]]


class ChannelRestart(ChannelError):
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
    logged once per attempt as one sentence and shown on the dashboard. On a shared account
    (`adapter.leadership`, redis backend) the adapter connects for sending, then reads only
    during this node's terms as the account's leader (see `_lead`).
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
    leadership = adapter.leadership
    if leadership is None:
        health.connected(name)
        await _read_until_restart(adapter, ingest, health, policy)
        return
    leadership.start()
    try:
        while True:
            health.standby(name)
            lease = await leadership.acquired()
            health.leading(name, lease.token)
            log.info("channel %s: this node (%s) reads the account now (lease token %d)",
                     name, leadership.node_id, lease.token)
            reason = await _lead(adapter, ingest, health, policy, leadership, lease)
            log.info("channel %s: this node stopped reading the account (%s); it still sends",
                     name, reason)
    finally:
        await leadership.stop()  # a clean stop hands the account over at once


async def _read_until_restart(adapter: ChannelAdapter, ingest: Ingest, health: HealthBoard,
                              policy: ReadPolicy, term: asyncio.Future[str] | None = None
                              ) -> None:
    """Read until `term` ends (or forever); on an error the loop cannot go past, stop the
    adapter and raise, so the supervisor's next attempt starts a fresh one."""
    try:
        await _read_forever(adapter, ingest, health, policy, term)
    except asyncio.CancelledError:
        raise  # the daemon stops the adapters itself
    except Exception as exc:
        # a restart, or an error the loop cannot go past (e.g. the quarantine file cannot be
        # written)
        await _before_restart(adapter, health, exc)
        raise


async def _lead(adapter: ChannelAdapter, ingest: Ingest, health: HealthBoard,
                policy: ReadPolicy, leadership: AccountLeadership, lease: Lease) -> str:
    """One term as the account's reader: start the read side, read until the term ends (the
    lease is lost or a fenced cursor write was refused), stop the read side; returns why it
    ended. An in-flight read (a long poll) is abandoned the moment the term ends, so this
    node never polls after another node could have taken the lease."""
    name = adapter.name
    term = asyncio.create_task(leadership.lost(lease), name=f"term:{name}:{lease.token}")
    try:
        try:
            await _until(adapter.start_reading(), term)
        except _TermOver:
            return term.result()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("channel %s could not start reading: %s; restarting it", name, exc)
            await _before_restart(adapter, health, exc)
            raise ChannelRestart(f"{name} could not start reading") from exc
        health.connected(name)
        await _read_until_restart(adapter, ingest, health, policy, term)
        return term.result() if term.done() else "stopped"
    finally:
        term.cancel()
        await _stop_reading_quietly(adapter)


class _TermOver(ChannelError):
    """The term ended while waiting on the platform."""


async def _until(work: Awaitable[T], term: asyncio.Future[str] | None) -> T:
    """Await `work`; if `term` ends first, cancel it and raise `_TermOver`."""
    if term is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, term}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled() and term.done():
        raise _TermOver
    return task.result()


async def _stop_reading_quietly(adapter: ChannelAdapter) -> None:
    try:
        await adapter.stop_reading()
    except Exception:
        log.exception("channel %s did not stop reading cleanly", adapter.name)


async def _before_restart(adapter: ChannelAdapter, health: HealthBoard,
                          exc: Exception) -> None:
    """Record why the channel restarts (a `ChannelRestart` was recorded where it was raised)
    and stop the adapter, so the supervisor's next attempt starts a fresh one."""
    if not isinstance(exc, ChannelRestart):
        health.read_failed(adapter.name, f"{type(exc).__name__}: {exc}")
    health.restarted(adapter.name)
    try:
        await adapter.stop()
    except Exception:
        log.exception("channel %s did not stop cleanly before its restart", adapter.name)


async def _read_forever(adapter: ChannelAdapter, ingest: Ingest, health: HealthBoard,
                        policy: ReadPolicy, term: asyncio.Future[str] | None = None) -> None:
    name = adapter.name
    while term is None or not term.done():
        try:
            async with asyncio.timeout(policy.stall_after_s):
                batch = await _until(adapter.read(), term)
        except _TermOver:
            return
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
