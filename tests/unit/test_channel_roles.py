"""A shared platform account's roles in the channel health (redis backend): leader with its lease
token, or standby, which is neither a failure nor a stalled channel for the watchdog."""

from __future__ import annotations

from pathlib import Path

from soulflow.channels.health import HealthBoard, LinkState, Role
from soulflow.channels.state import ChannelState
from soulflow.ops.service import loop_and_channel_problems
from soulflow.ops.watchdog import ChannelWatch, WatchLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_leader_and_standby_are_recorded_with_their_token_and_since() -> None:
    clock = Clock()
    health = HealthBoard(clock=clock)
    health.connecting("telegram")
    health.standby("telegram")
    record = health.get("telegram")
    assert (record.state, record.role, record.lease_token, record.role_since) == (
        LinkState.STANDBY, Role.STANDBY, None, 1000.0)
    clock.now = 1005.0
    health.standby("telegram")  # still standby: "since" keeps the first time
    assert record.role_since == 1000.0
    health.leading("telegram", 7)
    health.connected("telegram")
    shown = record.to_dict()
    assert (shown["status"], shown["role"], shown["lease_token"], shown["role_since"]) == (
        "connected", "leader", 7, 1005.0)
    health.read_failed("telegram", "boom")
    clock.now = 1010.0
    health.standby("telegram")  # the term ended: standby is no failure
    assert (record.state, record.consecutive_failures, record.lease_token) == (
        LinkState.STANDBY, 0, None)
    assert record.last_error == "boom"  # kept for the record
    assert loop_and_channel_problems([], health) == {}


def test_a_file_backend_channel_has_no_role() -> None:
    health = HealthBoard()
    health.connected("slack")
    assert health.get("slack").to_dict()["role"] is None


def test_the_watchdog_leaves_a_standby_channel_alone_and_counts_a_new_term() -> None:
    clock = Clock()
    health = HealthBoard(clock=clock)
    restarted: list[str] = []
    watch = ChannelWatch(health, lambda: ["telegram"], stall_after_s=60,
                         restart=lambda name, reason: restarted.append(name) is None,
                         log_=WatchLog())
    health.standby("telegram")
    assert watch.check(1000.0) == []
    assert watch.check(1000.0 + 3600) == []  # an hour on standby: nothing read, nothing wrong
    clock.now = 1000.0 + 3600
    health.leading("telegram", 3)  # took the lease just now
    assert watch.check(1000.0 + 3630) == []  # a new term is activity
    assert watch.check(1000.0 + 3700) != []  # but a leader that never reads is stalled
    assert restarted == ["telegram"]


async def test_drain_waits_for_the_file_write(tmp_path: Path) -> None:
    """File state: `drain()` (what adapters await for baselines and at stop) leaves the value
    on disk, without blocking the event loop on the fsyncs."""
    path = tmp_path / "telegram.json"
    state = ChannelState(path)
    assert not state.shared
    state.set("offset", 42)
    await state.load()  # nothing to load for a file state
    assert await state.drain()
    assert ChannelState(path).get("offset") == 42
    await state.close()
