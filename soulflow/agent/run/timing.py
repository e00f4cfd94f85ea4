"""Run durations for `/metrics`, measured from the run's own journal.

A run's duration is the time between its `run_started` and `done` events, as recorded: a run
that waited an hour for an approval, or was resumed after a restart, counts that time too,
which is what an operator asks ("how long do people wait for an answer?"). The store calls
`on_finished` once per run, when the event that finishes it is appended: the file journal and
the Redis one both report through `report_finished`.
"""

from __future__ import annotations

from collections.abc import Callable

import soulflow.agent.run.events as ev
from soulflow.agent.run.reducer import RunState

#: (status, seconds, a sub-agent's run?) of a finished run
FinishedListener = Callable[[str, float, bool], None]


def report_finished(listener: FinishedListener, events: Callable[[str], list[ev.Event]],
                    run_id: str, event: ev.Event, state: RunState) -> None:
    """After `event` was appended: if it finished the run, tell `listener` its status and
    duration (`events`: the journal's reader of a run's events)."""
    if event.type == ev.DONE and state.finished:
        started = next((e.at for e in events(run_id) if e.type == ev.RUN_STARTED), None)
        if started is not None and started > 0:
            listener(state.status, max(0.0, event.at - started), state.parent_run is not None)
