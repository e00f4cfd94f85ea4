"""`CronService`: fire due jobs, move their schedules forward, and sleep until the next one.

The service does not talk to the agent itself. ``fire(job, scheduled_time)`` is provided by the
runtime, which turns the job into an ordinary inbound message (see `cron_inbound_message`)
so a scheduled task is journaled, deduplicated and answered like anything a user writes.

Crash safety comes from the order of the two steps: a job is fired first and its state is
advanced second. A crash in between re-fires it with the *same* scheduled time, and the
message id derived from that time makes the inbound journal drop the duplicate.

Downtime: a job whose time passed while the daemon was down fires once at boot (with its
original scheduled time), not once per missed period, and then continues on its schedule.

Clock and sleep are injectable so tests run without waiting; the loop never sleeps longer
than `MAX_SLEEP_S`, so a wall-clock jump is noticed within a minute, and it wakes at once
when a job is added, removed, enabled or disabled.

Several nodes (a shared store, `CronStore.shared`): every node runs this loop over the same
jobs. The loop then re-reads the jobs at least every `poll_s` (a job added on another node,
by the dashboard or by `soulflow cron` fires on time), claims each occurrence before firing it
(`claim_occurrence`: one node fires it), re-reads the job after the claim (another node may
have fired and advanced it just before), and advances the job only if it still waits for that
occurrence (`advance`). A node that dies between firing and advancing leaves its claim to
expire; another node fires the occurrence again with the same message id, which the shared
seen ids drop if the first one got through. A store that cannot be reached (Redis down) is
logged once, retried every poll, and logged again when it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from soulflow.backends.base import CronStore, Offload, call_here
from soulflow.contracts import ChatRef, CronOccurrence, CronRunStatus, InboundMessage
from soulflow.cron.jobs import Job, JobState, PayloadKind, new_job_id
from soulflow.cron.schedule import Schedule, from_iso, next_fire_time, to_iso

__all__ = [
    "MAX_JOBS_PER_CHAT",
    "MAX_SLEEP_S",
    "CronService",
    "FireFn",
    "cron_inbound_message",
    "occurrence_stamp",
]

log = logging.getLogger(__name__)

MAX_SLEEP_S = 60.0
POLL_S = 1.0  # with a shared store: how often other nodes' changes are read
MAX_JOBS_PER_CHAT = 50
MAX_TEXT_CHARS = 4000
MAX_NAME_CHARS = 80

FireFn = Callable[[Job, datetime], Awaitable[None] | None]
Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def occurrence_stamp(scheduled: datetime) -> str:
    """The part of a fired job's message id that names the occurrence: whole seconds for
    scheduled times (as always), milliseconds for a manual `run` (two runs a second apart
    are two occurrences; the same scheduled time fired twice is one)."""
    stamp = scheduled.timestamp()
    return str(int(stamp)) if stamp.is_integer() else f"{stamp:.3f}"


def cron_inbound_message(job: Job, scheduled: datetime) -> InboundMessage:
    """The message a firing job injects into the normal inbound pipeline.

    The id depends only on the job and its scheduled time, so firing the same occurrence
    twice (crash before the state was saved) is dropped by the inbound journal's seen ids.
    """
    stamp = occurrence_stamp(scheduled)
    return InboundMessage(
        provider=job.chat.provider, chat_id=job.chat.chat_id, thread_id=job.chat.thread_id,
        message_id=f"cron-{job.id}-{stamp}", sender_id="cron", sender_name=f"cron: {job.name}",
        text=job.text, is_mention=True,
        cron=CronOccurrence(job.id, to_iso(scheduled)))


class CronService:
    """The scheduler loop plus the small facade the ``cron`` tool uses (add/list/remove/...)."""

    def __init__(self, store: CronStore, fire: FireFn, *, clock: Clock = _utc_now,
                 sleep: Sleep = asyncio.sleep, max_sleep_s: float = MAX_SLEEP_S,
                 max_jobs_per_chat: int = MAX_JOBS_PER_CHAT, poll_s: float = POLL_S,
                 may_fire: Callable[[Job], bool] = lambda job: True,
                 offload: Offload = call_here) -> None:
        """`may_fire(job)`: whether this node fires a due job at all (with a shared store the
        runtime leaves some jobs to the node holding their chat). `offload`: where the loop's
        store calls run (`Backend.offload`: off the event loop on Redis)."""
        self.store = store
        self._offload = offload
        self._fire = fire
        self._clock = clock
        self._sleep = sleep
        self.max_sleep_s = max_sleep_s
        self.max_jobs_per_chat = max_jobs_per_chat
        self.poll_s = poll_s
        self._may_fire = may_fire
        self._changed = asyncio.Event()
        self.fired_count = 0
        # occurrences (job id, next_run_at) another node claimed, or left to another node, in
        # the last round: not due here, so they must not make the loop spin meanwhile
        self._held_elsewhere: set[tuple[str, str | None]] = set()
        self.store_error: str | None = None  # why the store last failed, until it answers

    # -- facade for the tool and the operator's commands (every change wakes the loop) ---
    # The store calls run where the backend says (`offload`: Redis's store thread), so a
    # command waits for a slow Redis without holding the event loop.

    async def add_job(self, *, name: str, schedule: Schedule, chat: ChatRef, text: str,
                      kind: PayloadKind = PayloadKind.AGENT_TURN) -> Job:
        """Validate and store a new job; ValueError with a sentence for the model if refused."""
        text, name = text.strip(), " ".join(name.split())[:MAX_NAME_CHARS]
        if not text:
            raise ValueError("the job's text is empty")
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"the job's text is {len(text)} characters; the limit is "
                             f"{MAX_TEXT_CHARS}")
        if len(await self._offload(self.store.list, chat.key)) >= self.max_jobs_per_chat:
            raise ValueError(f"this chat already has {self.max_jobs_per_chat} cron jobs, the "
                             "limit; remove some first")
        now = self._clock().replace(microsecond=0)  # whole seconds read better in listings
        first = next_fire_time(schedule, now)
        if first is None:
            raise ValueError(f"{schedule.describe()} never fires after now"
                             + (" (that time is in the past)" if schedule.kind == "at" else ""))
        job = await self._offload(self.store.add, Job(
            id=new_job_id(), name=name or text[:40], schedule=schedule, chat=chat, text=text,
            created_at=to_iso(now) or "", state=JobState(next_run_at=to_iso(first)),
            kind=PayloadKind.parse(kind)))
        self.wake()
        return job

    async def list_jobs(self, chat: ChatRef | None = None) -> list[Job]:
        return await self.jobs(chat.key if chat is not None else None)

    async def jobs(self, chat_key: str | None = None) -> list[Job]:
        """Every job, or those of the chat `chat_key` names."""
        return await self._offload(self.store.list, chat_key)

    async def get_job(self, job_id: str) -> Job | None:
        return await self._offload(self.store.get, job_id)

    async def update_job(self, job_id: str, **fields: Any) -> Job:
        """`CronStore.update_state`; KeyError if the job is gone."""
        job = await self._offload(self.store.update_state, job_id, **fields)
        self.wake()
        return job

    async def remove_job(self, job_id: str) -> bool:
        removed = await self._offload(self.store.remove, job_id) is not None
        if removed:
            self.wake()
        return removed

    async def set_enabled(self, job_id: str, enabled: bool) -> Job:
        """Enable (scheduling from now on, no catch-up) or disable a job; KeyError if unknown."""
        job = await self.get_job(job_id)
        if job is None:
            raise KeyError(f"no cron job with id {job_id!r}")
        if not enabled:
            return await self.update_job(job_id, enabled=False, next_run_at=None)
        if not job.enabled:
            upcoming = next_fire_time(job.schedule, self._clock().replace(microsecond=0))
            if upcoming is None:
                raise ValueError(f"job {job_id} ({job.schedule.describe()}) would never fire "
                                 "again; add a new job instead")
            return await self.update_job(job_id, enabled=True, next_run_at=to_iso(upcoming))
        self.wake()
        return job

    def now(self) -> datetime:
        """The service's (injectable) clock."""
        return self._clock()

    async def run_now(self, job_id: str) -> Job:
        """Fire a job once now (``soulflow cron run``), whether or not it is enabled; its
        schedule is left as it was. KeyError if unknown."""
        job = await self.get_job(job_id)
        if job is None:
            raise KeyError(f"no cron job with id {job_id!r}")
        now = self._clock()
        if now.microsecond == 0:  # a manual run is never mistaken for a scheduled occurrence
            now = now.replace(microsecond=1000)
        status, error = await self._fire_one(job, now)
        current = await self.get_job(job_id)
        if current is None:  # removed while it fired
            return job
        return await self._offload(self.store.update_state, job_id, last_run_at=to_iso(now),
                                   last_status=status, last_error=error,
                                   runs=current.state.runs + 1)

    def wake(self) -> None:
        """Make the loop re-read the jobs now instead of after its current sleep."""
        self._changed.set()

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """Run forever (under the daemon's Supervisor): fire what is due, then sleep. A store
        that fails (Redis unreachable) is retried every poll, logged once per change."""
        reconciled = False
        while True:
            try:
                await self.store.refresh()  # the round's listings then wait for nothing
                if not reconciled:
                    await self._offload(self.reconcile)
                    reconciled = True
                if await self.run_due():
                    await self.store.refresh()  # what firing changed, read again
                delay = self.seconds_until_next()
            except Exception as exc:  # the store; a firing job's errors are caught per job
                self._store_failed(exc)
                delay = min(self.poll_s, self.max_sleep_s)
            else:
                self._store_answered()
            await self._wait(delay)

    def _store_failed(self, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:300]
        if self.store_error is None:
            log.error("cron: the job store failed (%s); retrying every %.0fs", reason,
                      self.poll_s)
        self.store_error = reason

    def _store_answered(self) -> None:
        if self.store_error is not None:
            log.info("cron: the job store answers again")
            self.store_error = None

    def reconcile(self) -> int:
        """Give enabled jobs without a usable next time one; returns how many were fixed.

        A missing time (hand-edited file, crash between add and its first state write) is
        recomputed from the job's last run or creation, so a time missed meanwhile still
        fires once instead of being skipped.
        """
        fixed = 0
        for job in self.store.list():
            if not job.enabled or job.state.next_run_at is not None:
                continue
            since = from_iso(job.state.last_run_at or job.created_at or None) or self._clock()
            upcoming = self._safe_next(job, since, anchor=since)
            if self.store.advance(job.id, None, enabled=upcoming is not None,
                                  next_run_at=to_iso(upcoming)) is not None:
                fixed += 1
        return fixed

    async def run_due(self) -> list[tuple[Job, datetime]]:
        """Fire every enabled job whose time has come (once each); returns what fired."""
        now = self._clock()
        fired: list[tuple[Job, datetime]] = []
        due = [job for job in self.store.list()
               if job.enabled and job.next_run is not None and job.next_run <= now]
        held: set[tuple[str, str | None]] = set()
        for job in sorted(due, key=lambda j: (j.next_run, j.id)):
            scheduled = job.next_run
            assert scheduled is not None
            if not self._may_fire(job) or not await self._claim(job, scheduled):
                held.add((job.id, job.state.next_run_at))
                continue
            if (now - scheduled).total_seconds() > self.max_sleep_s:
                log.info("cron job %s (%s) missed %s while the daemon was down; firing it "
                         "once now", job.id, job.name, to_iso(scheduled))
            status, error = await self._fire_one(job, scheduled)
            fired.append((job, scheduled))
            # the tool may have changed it while it fired
            current = await self._offload(self.store.get, job.id)
            if current is None:
                continue
            upcoming = (self._safe_next(current, max(scheduled, now), anchor=scheduled)
                        if current.enabled else None)
            result = {"last_run_at": to_iso(now), "last_status": status, "last_error": error,
                      "runs": current.state.runs + 1}
            if await self._offload(self.store.advance, job.id, job.state.next_run_at,
                                   enabled=upcoming is not None,
                                   next_run_at=to_iso(upcoming), **result) is None:
                # changed while it fired (disabled, re-timed): keep that, record the run
                with contextlib.suppress(KeyError):  # or removed meanwhile
                    await self._offload(self.store.update_state, job.id, **result)
        self._held_elsewhere = held
        return fired

    async def _claim(self, job: Job, scheduled: datetime) -> bool:
        """With a shared store: claim the occurrence, then make sure it is still the job's
        next one (another node may have fired and advanced it after our listing)."""
        if not self.store.shared:
            return True
        if not await self._offload(self.store.claim_occurrence, job.id,
                                   occurrence_stamp(scheduled)):
            return False
        current = await self._offload(self.store.get, job.id)
        return current is not None and current.enabled and \
            current.state.next_run_at == job.state.next_run_at

    def seconds_until_next(self) -> float:
        """How long the loop may sleep: until the earliest job, at most `max_sleep_s` (at most
        `poll_s` with a shared store, whose jobs other nodes change)."""
        longest = min(self.max_sleep_s, self.poll_s) if self.store.shared else self.max_sleep_s
        times = [job.next_run for job in self.store.list() if job.enabled and job.next_run
                 and (job.id, job.state.next_run_at) not in self._held_elsewhere]
        if not times:
            return longest
        delay = (min(t for t in times if t is not None) - self._clock()).total_seconds()
        return max(0.0, min(longest, delay))

    # -- internals -----------------------------------------------------------------------

    async def _fire_one(self, job: Job, scheduled: datetime
                        ) -> tuple[CronRunStatus, str | None]:
        try:
            result = self._fire(job, scheduled)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # one broken job must not stop the others
            log.exception("cron job %s (%s) could not fire", job.id, job.name)
            return CronRunStatus.ERROR, f"{type(exc).__name__}: {exc}"[:300]
        self.fired_count += 1
        return CronRunStatus.OK, None

    def _safe_next(self, job: Job, after: datetime, *, anchor: datetime) -> datetime | None:
        """The job's next time; None (the job gets disabled) if the schedule cannot be used."""
        try:
            return next_fire_time(job.schedule, after, anchor=anchor)
        except Exception:
            log.exception("cron job %s (%s) has an unusable schedule; disabling it", job.id,
                          job.name)
            return None

    async def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if a job changes meanwhile."""
        if self._changed.is_set():
            self._changed.clear()
            return
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(self._changed.wait())
        try:
            done, _ = await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                if not task.done():
                    task.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)
        self._changed.clear()
        if sleeper in done:
            sleeper.result()  # an injected sleep may raise (tests use it to stop the loop)
