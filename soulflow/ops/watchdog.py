"""The watchdog: find agent runs and channel loops that are alive but no longer moving.

* **Stuck run.** A run in `running` (not waiting for an approval or a person: those wait as
  long as people take) whose journal - and its sub-runs' journals - got no event for
  `run_stuck_after_s`. The reason is recorded in the run's journal (an `error` event of kind
  `watchdog`) and whoever drives it is asked to stop (the chat's abort, or the quiet-turn
  runner's); a run nobody drives, or one still running a tick after that, is cancelled
  outright with the reason as its final status.
* **Stalled channel.** A channel loop with neither a read nor a failure for
  `channel_stall_after_s`. The read loop already restarts a read that hangs; this catches
  what it cannot see, e.g. a connect that never returns. The loop is restarted through the
  Supervisor, the adapter stopped in between.

Every action is kept (last `MAX_ACTIONS`) with its reason for `/api/state` and the log.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.channels.health import HealthBoard, LinkState

__all__ = ["Action", "ChannelWatch", "RunWatch", "WatchLog"]

log = logging.getLogger(__name__)

MAX_ACTIONS = 50


@dataclass(frozen=True, slots=True)
class Action:
    """Something the watchdog did, and why."""

    at: float
    kind: str  # run_aborted | run_cancelled | channel_restarted
    target: str  # run id or channel name
    reason: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class WatchLog:
    def __init__(self) -> None:
        self.actions: deque[Action] = deque(maxlen=MAX_ACTIONS)

    def record(self, action: Action) -> Action:
        self.actions.append(action)
        log.warning("watchdog: %s %s: %s", action.kind, action.target, action.reason)
        return action


class RunWatch:
    """Stuck agent runs. `stop_chat(chat_key)` aborts the chat's driven runs (returns how
    many); `abort_run(run_id)` asks another driver (the quiet-turn runner) to stop. `owns`
    (several daemons on shared run journals): only runs of chats this node holds are
    watched, the runs it drives; each node watches its own."""

    def __init__(self, loop: Callable[[], AgentLoop | None], *, stuck_after_s: float,
                 stop_chat: Callable[[str], int], abort_run: Callable[[str], bool],
                 log_: WatchLog, owns: Callable[[str], bool] = lambda chat_key: True) -> None:
        self._loop = loop
        self._owns = owns
        self.stuck_after_s = stuck_after_s
        self._stop_chat = stop_chat
        self._abort_run = abort_run
        self._log = log_
        self._aborted: dict[str, float] = {}  # run id -> when it was asked to stop

    async def running(self, now: float) -> list[tuple[str, float]]:
        """(run id, seconds since its last event or its sub-runs') of every running run of
        the chats this node holds (read without holding the event loop: `find_open`)."""
        loop = self._loop()
        if loop is None:
            return []
        store = loop.store
        # A task step's run belongs to the task engine, which drives and cancels it through the
        # task; stopping "its chat" here would abort the chat's own runs instead. Each step is
        # bounded by the provider's and the tools' timeouts.
        running = [run_id for run_id in await store.find_open(frozenset({ev.RUNNING}),
                                                              chats=self._owns)
                   if not store.state(run_id).chat.task_id]
        last: dict[str, float] = {}
        for run_id in running:
            events = store.events(run_id)
            last[run_id] = events[-1].at if events else now
        for run_id in running:  # a parent waiting on its sub-agent is as alive as the child
            parent = store.state(run_id).parent_run
            if parent in last:
                last[parent] = max(last[parent], last[run_id])
        return [(run_id, now - at) for run_id, at in last.items()]

    def check(self, now: float, running: list[tuple[str, float]]) -> list[Action]:
        """Act on `running` (what `running(now)` read): ask stuck runs to stop, cancel those
        that did not."""
        loop = self._loop()
        if loop is None:
            return []
        actions = []
        still = {run_id for run_id, _ in running}
        for run_id in [r for r in self._aborted if r not in still]:
            del self._aborted[run_id]  # it stopped
        for run_id, idle in running:
            asked = self._aborted.get(run_id)
            if asked is not None:
                if now - asked >= min(self.stuck_after_s, 60.0):
                    actions.append(self._cancel(loop, run_id, now, "it did not stop when "
                                                "asked by the watchdog"))
                continue
            if idle < self.stuck_after_s:
                continue
            reason = (f"no progress for {idle / 60:.0f} min (nothing waits for an approval "
                      "or an answer)")
            loop.store.append(run_id, ev.Event(ev.ERROR, {"message": f"watchdog: {reason}",
                                                          "kind": "watchdog"}))
            chat_key = loop.store.state(run_id).chat.key
            if self._abort_run(run_id) or self._stop_chat(chat_key) > 0:
                self._aborted[run_id] = now
                actions.append(self._log.record(Action(now, "run_aborted", run_id, reason)))
            else:
                actions.append(self._cancel(loop, run_id, now, reason))
        return actions

    def _cancel(self, loop: AgentLoop, run_id: str, now: float, reason: str) -> Action:
        self._aborted.pop(run_id, None)
        loop.cancel(run_id, f"stopped by the watchdog: {reason}")
        return self._log.record(Action(now, "run_cancelled", run_id, reason))


class ChannelWatch:
    """Stalled channel loops. `restart(name, reason)` restarts one (False if it could not)."""

    def __init__(self, health: HealthBoard, names: Callable[[], Iterable[str]], *,
                 stall_after_s: float, restart: Callable[[str, str], bool],
                 log_: WatchLog) -> None:
        self._health = health
        self._names = names
        self.stall_after_s = stall_after_s
        self._restart = restart
        self._log = log_
        self._since: dict[str, float] = {}  # first seen / last restarted by us

    def check(self, now: float) -> list[Action]:
        actions = []
        for name in self._names():
            record = self._health.get(name)
            since = self._since.setdefault(name, now)
            if record.state in (LinkState.STOPPED, LinkState.STANDBY):
                continue  # standby: another node reads the account (redis backend)
            activity = max(t for t in (record.last_read_at, record.last_error_at, since,
                                       record.role_since) if t is not None)
            idle = now - activity
            if idle < self.stall_after_s:
                continue
            reason = (f"no read and no error for {idle:.0f}s (state {record.state.value}); "
                      "restarted by the watchdog")
            if self._restart(name, reason):
                self._health.restarted(name)
                self._since[name] = now
                actions.append(self._log.record(Action(now, "channel_restarted", name, reason)))
        return actions
