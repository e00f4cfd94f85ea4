"""`HeartbeatService`: every `HEARTBEAT_INTERVAL`, let the agent go through `HEARTBEAT.md`.

Each tick reads the checklist from the workspace. When it holds nothing to act on (see
`checklist.actionable_lines`) the tick ends without a model call. Otherwise the agent runs
it as a quiet turn in the `heartbeat` session (see `turns.py`): bounded history, its own
memory consolidation, and a message to the heartbeat chat only when the answer is not
`HEARTBEAT_OK`. A heartbeat still waiting for an approval is not started again.

The time of the last tick is kept by the backend (`HeartbeatStateStore`):
`runtime/heartbeat/state.json`, so a restart neither runs an extra heartbeat nor postpones the
next one by a whole interval, or with Redis a hash every node reads:
the heartbeat runs on one node at a time (the one holding its notice chat, see
`soulflow/ops/single.py`), and the node that takes over goes on from the last tick of the
one before, so the interval holds across a failover. The loop re-reads the state before
each sleep for that reason. Clock and sleep are injected (tests run without waiting); the
loop runs under the daemon's Supervisor as `heartbeat` and stops by cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from soulflow.backends.base import HeartbeatStateStore, Offload, call_here
from soulflow.contracts import ChatRef
from soulflow.heartbeat.checklist import actionable_lines, heartbeat_prompt
from soulflow.heartbeat.turns import QuietTurn, QuietTurnRunner, TurnOutcome, TurnStatus
from soulflow.storage.beneath import Beneath

__all__ = ["HEARTBEAT_SESSION", "HeartbeatService", "HeartbeatState", "TickResult",
           "TickStatus"]

log = logging.getLogger(__name__)

HEARTBEAT_SESSION = "heartbeat"
CHECKLIST_FILE = "HEARTBEAT.md"
FIRST_TICK_DELAY_S = 60.0  # after a first boot: let channels connect before the first check

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TickStatus(StrEnum):
    SKIPPED = "skipped"  # nothing to act on in HEARTBEAT.md (no model call)
    MISSING = "missing"  # no HEARTBEAT.md
    RAN = "ran"  # the agent ran; see `outcome`


@dataclass(frozen=True, slots=True)
class TickResult:
    status: TickStatus
    at: float
    outcome: TurnOutcome | None = None

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"status": self.status.value, "at": self.at}
        if self.outcome is not None:
            data["outcome"] = self.outcome.status.value
            data["run_id"] = self.outcome.run_id
        return data


@dataclass(frozen=True, slots=True)
class HeartbeatState:
    """The last tick: when, and how it went."""

    last_tick_at: float | None = None
    last_status: str = ""
    last_outcome: str = ""

    @classmethod
    def from_dict(cls, data: object) -> HeartbeatState:
        """From what `asdict` wrote; anything unreadable is "never ticked"."""
        if not isinstance(data, dict):
            return cls()
        last = data.get("last_tick_at")
        try:
            at = float(last) if isinstance(last, int | float | str) and last != "" else None
        except ValueError:
            at = None
        return cls(at, str(data.get("last_status") or ""), str(data.get("last_outcome") or ""))


class HeartbeatService:
    def __init__(self, workspace: Path, state: HeartbeatStateStore, runner: QuietTurnRunner,
                 target: ChatRef, *, interval_s: float, clock: Clock = time.time,
                 sleep: Sleep = asyncio.sleep, offload: Offload = call_here) -> None:
        """`offload`: where the loop's reads and writes of its state run (`Backend.offload`:
        off the event loop on Redis)."""
        self.workspace = workspace
        self._files = Beneath(workspace)
        self.runner = runner
        self.target = target
        self.interval_s = interval_s
        self._clock = clock
        self._sleep = sleep
        self._store = state
        self._offload = offload
        self._state = self._load()
        self.ticks = 0
        self.model_calls = 0  # ticks that ran the agent (the rest were skipped for free)

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    async def run(self) -> None:
        """Tick every interval, forever (the Supervisor's `heartbeat` loop)."""
        if not self.enabled:
            return
        while True:
            # another node may have ticked (Redis)
            self._state = HeartbeatState.from_dict(await self._offload(self._store.load))
            await self._sleep(self.seconds_until_next())
            await self.tick()

    def seconds_until_next(self) -> float:
        last = self._state.last_tick_at
        if last is None:
            return min(FIRST_TICK_DELAY_S, self.interval_s)
        return max(0.0, min(self.interval_s, last + self.interval_s - self._clock()))

    async def tick(self) -> TickResult:
        """One heartbeat: read the checklist, skip or run it, remember when."""
        now = self._clock()
        self.ticks += 1
        try:  # beneath the workspace, no links: a planted link is refused, never read
            checklist = self._files.read_bytes(CHECKLIST_FILE).decode("utf-8")
        except FileNotFoundError:
            result = TickResult(TickStatus.MISSING, now)
        except (OSError, UnicodeDecodeError) as exc:
            log.error("heartbeat: cannot read %s (%s); skipping this tick", CHECKLIST_FILE, exc)
            result = TickResult(TickStatus.MISSING, now)
        else:
            if not actionable_lines(checklist):
                result = TickResult(TickStatus.SKIPPED, now)
            else:
                self.model_calls += 1
                outcome = await self.runner.run(QuietTurn(
                    session_key=HEARTBEAT_SESSION, target=self.target,
                    text=heartbeat_prompt(checklist), turn_key=f"heartbeat-{int(now)}",
                    label="heartbeat"))
                if outcome.status is TurnStatus.NOTIFIED:
                    log.info("heartbeat: sent a notice to %s", self.target.key)
                result = TickResult(TickStatus.RAN, now, outcome)
        self._state = HeartbeatState(now, result.status.value,
                                     result.outcome.status.value if result.outcome else "")
        await self._offload(self._store.save, asdict(self._state))
        return result

    def _load(self) -> HeartbeatState:
        return HeartbeatState.from_dict(self._store.load())

    def status(self) -> dict[str, object]:
        """For /api/state: when it last ran, with what result, and where notices go."""
        return {"enabled": self.enabled, "interval_s": self.interval_s,
                "target": self.target.key, "ticks": self.ticks,
                "model_calls": self.model_calls, "last_tick_at": self._state.last_tick_at,
                "last_status": self._state.last_status,
                "last_outcome": self._state.last_outcome}
