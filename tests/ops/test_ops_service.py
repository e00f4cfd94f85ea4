"""The ops health tick: what /api/state shows under "ops", problems that last reach the
notice chat once per interval, and decisions are merged on a schedule."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.channels.health import HealthBoard
from soulflow.decision.service import DecisionService
from soulflow.ops import (
    ChannelWatch,
    NoticeBoard,
    OpsPolicy,
    OpsProbes,
    OpsRuntimeService,
    RunWatch,
    WatchLog,
)
from tests.ops.clock import T0, Clock


async def test_a_problem_is_told_once_per_interval_and_its_end_too() -> None:
    sent: list[str] = []
    board = NoticeBoard(sent.append, after_s=600, interval_s=3600)
    slack = {"channel:slack": "channel slack is failing: invalid_auth"}
    assert await board.update(slack, T0) == []  # new: not yet
    assert await board.update(slack, T0 + 599) == []
    [notice] = await board.update(slack, T0 + 600)
    assert "channel slack is failing: invalid_auth (for 10 min)" in notice
    for minute in range(11, 60):  # still broken: quiet within the interval
        assert await board.update(slack, T0 + minute * 60) == []
    assert len(await board.update(slack, T0 + 600 + 3600)) == 1  # reminded after the interval
    assert await board.update({}, T0 + 5000) == ["Resolved: channel slack is failing: invalid_auth"]
    assert await board.update({"provider:x": "flap"}, T0 + 5001) == []
    assert await board.update({}, T0 + 5002) == []  # never reported, so no "resolved" either
    assert board.sent == 3 and len(sent) == 3


def build(clock: Clock, loops: list[dict[str, Any]], sent: list[str], *,
          health: HealthBoard | None = None, decisions: DecisionService | None = None,
          queues: Callable[[], dict[str, int]] = lambda: {"outbox_pending": 2},
          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> OpsRuntimeService:
    health = health or HealthBoard(clock=clock)
    log = WatchLog()
    policy = OpsPolicy(tick_s=30, notice_after_s=0, notice_interval_s=3600,
                       decision_dedupe_s=3600)
    return OpsRuntimeService(
        policy,
        OpsProbes(loops=lambda: loops, queues=queues,
                  providers=lambda: {"default": "openrouter", "down": ["openrouter"]},
                  extra={"heartbeat": lambda: {"enabled": True}}),
        health=health,
        runs=RunWatch(lambda: None, stuck_after_s=900, stop_chat=lambda key: 0,
                      abort_run=lambda run_id: False, log_=log),
        channels=ChannelWatch(health, lambda: [], stall_after_s=600,
                              restart=lambda name, reason: False, log_=log),
        notices=NoticeBoard(sent.append, after_s=policy.notice_after_s,
                            interval_s=policy.notice_interval_s),
        watch_log=log, decisions=decisions, clock=clock, sleep=sleep)


async def test_the_tick_publishes_a_reading_and_reports_what_is_broken() -> None:
    clock = Clock()
    sent: list[str] = []
    loops = [{"name": "cron", "running": False, "restarts": 3,
              "last_error": "RuntimeError: boom"},
             {"name": "heartbeat", "running": False, "restarts": 0, "last_error": ""},
             {"name": "ops", "running": True, "restarts": 0, "last_error": ""}]
    health = HealthBoard(clock=clock)
    ops = build(clock, loops, sent, health=health)
    health.read_failed("slack", "invalid_auth")
    snapshot = await ops.tick()
    assert snapshot["queues"] == {"outbox_pending": 2}
    assert snapshot["heartbeat"] == {"enabled": True}
    assert snapshot["loops"] == loops
    assert {p["key"] for p in snapshot["problems"]} == {"loop:cron", "channel:slack",
                                                         "provider:openrouter"}
    [notice] = sent  # one message for all three, not three
    assert "background loop cron is down (RuntimeError: boom)" in notice
    assert "channel slack is failing: invalid_auth" in notice
    assert "model provider openrouter is down" in notice
    clock.now += 30
    await ops.tick()
    assert len(sent) == 1 and ops.snapshot()["ticks"] == 2


async def test_decisions_are_merged_on_a_schedule(tmp_path: Path) -> None:
    path = tmp_path / "decisions" / "index.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "decisions": {
        "Reply Language": {"value": "Korean", "priority": 1, "updated_at": 10.0},
        "reply_language": {"value": "English", "priority": 0, "updated_at": 20.0},
        "reply-language": {"value": "German", "priority": 1, "updated_at": 5.0},
        "deploy_window": {"value": "Friday", "priority": 0, "updated_at": 1.0},
    }}), encoding="utf-8")
    decisions = DecisionService(FileDecisionStore(path))
    clock = Clock()
    ops = build(clock, [], [], decisions=decisions)
    await ops.tick()
    assert ops.decisions_merged == 2
    stored = json.loads(path.read_text())["decisions"]
    assert set(stored) == {"reply_language", "deploy_window"}
    assert stored["reply_language"]["value"] == "Korean"  # highest priority, then newest
    decisions.set("Deploy Window", "Friday")  # unchanged decision: no write, no duplicate
    clock.now += 60
    await ops.tick()  # not due again yet
    assert ops.snapshot()["decisions"]["last_dedupe_at"] == T0


async def test_a_tick_that_keeps_failing_is_logged_once_and_its_recovery_too(
        caplog: Any) -> None:
    """A store that is away (Redis) fails every tick: one traceback, one line when it is back."""
    reads = 0
    slept = 0

    def queues() -> dict[str, int]:
        nonlocal reads
        reads += 1
        if reads <= 3:
            raise ConnectionError("Redis is away")
        return {}

    async def sleep(seconds: float) -> None:
        nonlocal slept
        slept += 1
        if slept > 5:  # five ticks, then stop the loop
            raise asyncio.CancelledError

    ops = build(Clock(), [], [], queues=queues, sleep=sleep)
    with caplog.at_level(logging.DEBUG, logger="soulflow.ops.service"):
        try:
            await ops.run()
        except asyncio.CancelledError:
            pass
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert messages == ["ops tick failed", "ops ticks work again"]
