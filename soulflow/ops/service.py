"""`OpsRuntimeService`: the daemon watching itself.

Every `tick_s` it takes a health reading - supervised loops (alive, restarts, last error),
queue depths, model providers, channels - and publishes it in `/api/state` under `ops`; runs
the watchdog (stuck runs, stalled channels: see `watchdog.py`); merges duplicate decisions
every `decision_dedupe_s`; and tells the notice chat about problems that last (see
`notices.py`). It only reads other services' state and acts through their own controls
(abort events, `Supervisor.restart`, `AgentLoop.cancel`), so a bug here cannot corrupt them.
It runs as the supervised loop `ops`; clock and sleep are injected for tests.

In a cluster (Redis) every node takes its own reading, watches its own channel loops and the
runs of the chats it holds (`RunWatch` owns), the decision dedupe runs only on the node
`is_leader()` names (the holder of `service:ops`, see `single.py`), and a notice is told once
across the nodes (`NoticeBoard` claim).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from soulflow.backends.base import Offload, call_here
from soulflow.channels.health import HealthBoard, LinkState
from soulflow.decision.service import DecisionService
from soulflow.ops.notices import NoticeBoard
from soulflow.ops.watchdog import ChannelWatch, RunWatch, WatchLog

__all__ = ["OpsPolicy", "OpsProbes", "OpsRuntimeService", "loop_and_channel_problems"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OpsPolicy:
    tick_s: float = 30.0
    run_stuck_after_s: float = 900.0
    channel_stall_after_s: float = 600.0
    notice_after_s: float = 600.0
    notice_interval_s: float = 3600.0
    decision_dedupe_s: float = 3600.0

    @classmethod
    def from_settings(cls, setting: Callable[[str], Any]) -> OpsPolicy:
        return cls(*(float(setting(name)) for name in (
            "OPS_TICK_S", "OPS_RUN_STUCK_AFTER_S", "OPS_CHANNEL_STALL_AFTER_S",
            "OPS_NOTICE_AFTER_S", "OPS_NOTICE_INTERVAL_S", "OPS_DECISION_DEDUPE_S")))


@dataclass(slots=True)
class OpsProbes:
    """Read-only views of the daemon the health reading is made of."""

    loops: Callable[[], list[dict[str, Any]]]  # Supervisor.status()
    queues: Callable[[], dict[str, int]]
    providers: Callable[[], dict[str, Any]]  # {"default", "down": [names], ...}
    extra: dict[str, Callable[[], Any]] = field(default_factory=dict)  # e.g. heartbeat


def loop_and_channel_problems(loops: list[dict[str, Any]],
                              health: HealthBoard) -> dict[str, str]:
    """Supervised loops that are down and channels failing (key -> sentence): the problems
    `Runtime.problems()` reports now and the ops reading times and notices."""
    problems: dict[str, str] = {}
    for loop in loops:
        if not loop.get("running") and loop.get("last_error"):
            problems[f"loop:{loop['name']}"] = (f"background loop {loop['name']} is down "
                                                f"({loop['last_error']})")
    for record in health:
        if record.state is LinkState.FAILING:
            problems[f"channel:{record.name}"] = (
                f"channel {record.name} is failing: {record.last_error or 'no detail'}")
    return problems


class OpsRuntimeService:
    def __init__(self, policy: OpsPolicy, probes: OpsProbes, *, health: HealthBoard,
                 runs: RunWatch, channels: ChannelWatch, notices: NoticeBoard,
                 watch_log: WatchLog, decisions: DecisionService | None = None,
                 clock: Clock = time.time, sleep: Sleep = asyncio.sleep,
                 is_leader: Callable[[], bool] = lambda: True,
                 offload: Offload = call_here) -> None:
        self.policy = policy
        self._probes = probes
        self._health = health
        self.runs = runs
        self.channels = channels
        self.notices = notices
        self._log = watch_log
        self._decisions = decisions
        self._is_leader = is_leader
        self._offload = offload  # the decision dedupe's transaction, off the event loop
        self._clock = clock
        self._sleep = sleep
        self._last_dedupe: float | None = None
        self.decisions_merged = 0
        self.ticks = 0
        self._snapshot: dict[str, Any] = {"ticks": 0}

    async def run(self) -> None:
        """Tick forever (the Supervisor's `ops` loop); a failing tick is logged, not fatal:
        with its traceback when ticks start failing, then once more when they work again (a
        store that is away, Redis, fails every tick until it is back)."""
        failing = False
        while True:
            await self._sleep(self.policy.tick_s)
            try:
                await self.tick()
            except Exception as exc:
                if not failing:
                    log.exception("ops tick failed")
                else:
                    log.debug("ops tick failed again: %s: %s", type(exc).__name__, exc)
                failing = True
            else:
                if failing:
                    log.info("ops ticks work again")
                failing = False

    async def tick(self) -> dict[str, Any]:
        """One reading: watchdog, decision dedupe when due, problems, notices, snapshot."""
        now = self._clock()
        self.ticks += 1
        leader = self._is_leader()
        running = await self.runs.running(now)
        cancelled = {a.target for a in self.runs.check(now, running) if a.kind == "run_cancelled"}
        self.channels.check(now)
        if leader:  # shared decisions: one node merges them
            await self._dedupe_decisions(now)
        if self._decisions is not None:  # what other nodes set reaches an idle node's prompts
            await self._decisions.refresh()
        loops = self._probes.loops()
        providers = self._probes.providers()
        problems = self._problems(loops, providers)
        await self.notices.update(problems, now)
        self._snapshot = {
            "at": now, "ticks": self.ticks, "tick_s": self.policy.tick_s, "leader": leader,
            "loops": loops, "queues": self._probes.queues(), "providers": providers,
            "channels": self._channels(now),
            "runs": [{"run_id": run_id, "idle_s": round(idle, 1)} for run_id, idle in running
                     if run_id not in cancelled],
            "problems": [p.to_dict() for p in self.notices.problems.values()],
            "actions": [a.to_dict() for a in list(self._log.actions)[-10:]],
            "notices_sent": self.notices.sent,
            "decisions": {"last_dedupe_at": self._last_dedupe,
                          "merged": self.decisions_merged},
            **{name: probe() for name, probe in self._probes.extra.items()},
        }
        return self._snapshot

    def snapshot(self) -> dict[str, Any]:
        """The last reading (for `/api/state`)."""
        return self._snapshot

    # -- internals -----------------------------------------------------------------------

    def _channels(self, now: float) -> list[dict[str, Any]]:
        rows = []
        for record in self._health:
            seen = [t for t in (record.last_read_at, record.last_error_at) if t is not None]
            rows.append({"name": record.name, "status": record.state.value,
                         "idle_s": round(now - max(seen), 1) if seen else None,
                         "restarts": record.restarts})
        return rows

    def _problems(self, loops: list[dict[str, Any]],
                  providers: dict[str, Any]) -> dict[str, str]:
        problems = loop_and_channel_problems(loops, self._health)
        for name in providers.get("down") or []:
            problems[f"provider:{name}"] = f"model provider {name} is down"
        return problems

    async def _dedupe_decisions(self, now: float) -> None:
        every = self.policy.decision_dedupe_s
        if self._decisions is None or every <= 0:
            return
        if self._last_dedupe is not None and now - self._last_dedupe < every:
            return
        self._last_dedupe = now
        merged = await self._offload(self._decisions.dedupe)
        if merged:
            self.decisions_merged += merged
            log.info("merged %d duplicate decision(s)", merged)
