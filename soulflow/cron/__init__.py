"""Scheduled messages to the agent: schedules, the job store and the scheduler loop.

* `schedule` - ``at`` / ``every`` / ``cron`` schedules, validation, next fire times.
* `store` - `CronStore`: jobs in ``runtime/cron/cron-store.json``, written atomically.
* `service` - `CronService`: fires due jobs through a runtime-provided callback and is the
  facade the ``cron`` tool talks to.

A fired job becomes an ordinary inbound message (`cron_inbound_message`), so it is journaled,
deduplicated and answered by the same pipeline as a user's message; see docs/cron.md.
"""

from __future__ import annotations

from soulflow.cron.jobs import Job, JobState, PayloadKind
from soulflow.cron.schedule import Schedule, from_iso, next_fire_time, to_iso
from soulflow.cron.service import (
    MAX_JOBS_PER_CHAT,
    CronService,
    FireFn,
    cron_inbound_message,
)

__all__ = [
    "MAX_JOBS_PER_CHAT",
    "CronService",
    "FireFn",
    "Job",
    "JobState",
    "PayloadKind",
    "Schedule",
    "cron_inbound_message",
    "from_iso",
    "next_fire_time",
    "to_iso",
]
