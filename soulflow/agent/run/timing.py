"""Run durations for `/metrics`, measured from the run's own journal.

A run's duration is the time between its `run_started` and `done` events, as recorded: a run
that waited an hour for an approval, or was resumed after a restart, counts that time too,
which is what an operator asks ("how long do people wait for an answer?"). The store calls
`on_finished` once per run, when the event that finishes it is appended.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.run.reducer import RunState
from soulflow.agent.run.store import RunJournal, ThreadStore

#: (status, seconds, a sub-agent's run?) of a finished run
FinishedListener = Callable[[str, float, bool], None]


def report_finished(listener: FinishedListener, store: RunJournal, run_id: str,
                    event: ev.Event, state: RunState) -> None:
    """After `event` was appended: if it finished the run, tell `listener` its status and
    duration (the file store and the Redis store both report through this)."""
    if event.type == ev.DONE and state.finished:
        started = next((e.at for e in store.events(run_id) if e.type == ev.RUN_STARTED), None)
        if started is not None and started > 0:
            listener(state.status, max(0.0, event.at - started), state.parent_run is not None)


class TimedThreadStore(ThreadStore):
    """A ThreadStore that reports each finished run's status and duration."""

    def __init__(self, directory: Path, *, on_finished: FinishedListener, fsync: str = "interval",
                 redact: Callable[[Any], Any] | None = None) -> None:
        super().__init__(directory, fsync=fsync, redact=redact)
        self._on_finished = on_finished

    def append(self, run_id: str, event: ev.Event) -> RunState:
        state = super().append(run_id, event)
        report_finished(self._on_finished, self, run_id, event, state)
        return state
