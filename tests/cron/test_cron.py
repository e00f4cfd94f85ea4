"""Cron schedules, the job store and the scheduler loop, all on a fake clock (no waiting)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from soulflow.backends.file.cron import FileCronStore
from soulflow.backends.file.inbound import InboundJournal
from soulflow.contracts import ChatRef, CronOccurrence, CronRunStatus
from soulflow.cron import CronService, Job, Schedule, cron_inbound_message, next_fire_time
from soulflow.cron.jobs import JobState

CHAT = ChatRef("telegram", "42", None)
T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)  # a Monday


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def sched(**data: Any) -> Schedule:
    return Schedule.from_dict(data)


def times(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    moment = start
    for _ in range(count):
        nxt = next_fire_time(schedule, moment)
        assert nxt is not None
        found.append(nxt)
        moment = nxt
    return found


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Fired:
    def __init__(self) -> None:
        self.calls: list[tuple[str, datetime]] = []

    def __call__(self, job: Job, scheduled: datetime) -> None:
        self.calls.append((job.id, scheduled))


def make_service(tmp_path: Path, clock: Clock, fire: Any = None, **kwargs: Any) -> CronService:
    store = FileCronStore(tmp_path / "cron" / "cron-store.json")
    return CronService(store, fire or Fired(), clock=clock, **kwargs)


# ----------------------------------------------------------------- schedules


@pytest.mark.parametrize(("data", "message"), [
    ({"kind": "hourly"}, "kind must be one of at, every, cron"),
    ({"kind": "every", "every_s": 5}, "at least 10 seconds"),
    ({"kind": "every", "every_s": 12.5}, "whole number"),
    ({"kind": "every", "every_s": True}, "every_s"),
    ({"kind": "every", "every_s": 60, "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"kind": "at", "at": "tomorrow at nine"}, "not an ISO 8601 datetime"),
    ({"kind": "at"}, "needs at"),
    ({"kind": "at", "at": "2024-03-31T02:30", "tz": "Europe/Berlin"}, "does not exist in"),
    ({"kind": "cron", "expr": "* * * *"}, "has 4 field(s); it needs 5"),
    ({"kind": "cron", "expr": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ({"kind": "cron", "expr": "0 9 1 * 1"}, "both day-of-month and day-of-week"),
    ({"kind": "cron", "expr": "0 9 * * 8"}, "invalid day-of-week '8'"),
    ({"kind": "cron", "expr": "0 9 * * 5-1"}, "must go from low to high"),
    ({"kind": "cron"}, "needs expr"),
])
def test_invalid_schedules_have_clear_messages(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        Schedule.from_dict(data)
    assert message in str(info.value)


def test_schedule_round_trip_and_description() -> None:
    for data, text in [
        ({"kind": "every", "every_s": 3600}, "every 1h (UTC)"),
        ({"kind": "cron", "expr": "0  9 * * 1-5", "tz": "Europe/Berlin"},
         "cron '0 9 * * 1-5' (Europe/Berlin)"),
        ({"kind": "at", "at": "2030-01-31T09:00:00+01:00"},
         "once at 2030-01-31T09:00:00+01:00 (UTC)"),
    ]:
        schedule = sched(**data)
        assert schedule.describe() == text
        assert Schedule.from_dict(schedule.to_dict()) == schedule
    assert sched(kind="every", every_s=90).to_dict() == {"kind": "every", "every_s": 90,
                                                         "tz": "UTC"}


def test_every_is_phase_locked_to_its_anchor() -> None:
    every = sched(kind="every", every_s=60)
    assert next_fire_time(every, T0) == T0 + timedelta(seconds=60)
    # catching up after downtime keeps the phase of the last scheduled time
    late = T0 + timedelta(seconds=605)
    assert next_fire_time(every, late, anchor=T0) == T0 + timedelta(seconds=660)
    # exactly on a fire time means the *next* one
    assert next_fire_time(every, T0 + timedelta(seconds=120), anchor=T0) == \
        T0 + timedelta(seconds=180)


def test_every_counts_absolute_time_across_dst() -> None:
    every = sched(kind="every", every_s=3600, tz="Europe/Berlin")
    start = utc(2024, 3, 31, 0, 30)  # the spring-forward night
    assert times(every, start, 3) == [utc(2024, 3, 31, 1, 30), utc(2024, 3, 31, 2, 30),
                                      utc(2024, 3, 31, 3, 30)]


def test_at_fires_once_and_naive_times_are_read_in_tz() -> None:
    at = sched(kind="at", at="2024-06-01T09:00", tz="Europe/Berlin")
    assert at.at == "2024-06-01T09:00:00+02:00"
    assert next_fire_time(at, T0) == utc(2024, 6, 1, 7, 0)
    assert next_fire_time(at, utc(2024, 6, 1, 7, 0)) is None
    assert next_fire_time(sched(kind="at", at="2024-06-01T09:00:00Z"), T0) == utc(2024, 6, 1, 9)


def test_cron_weekdays_follow_crontab_numbering() -> None:
    weekdays = sched(kind="cron", expr="0 9 * * 1-5")
    found = times(weekdays, utc(2023, 12, 31, 0, 0), 6)  # from Sunday
    assert [t.strftime("%a %H:%M") for t in found] == [
        "Mon 09:00", "Tue 09:00", "Wed 09:00", "Thu 09:00", "Fri 09:00", "Mon 09:00"]
    for expr in ("0 9 * * 0", "0 9 * * 7", "0 9 * * sun"):
        nxt = next_fire_time(sched(kind="cron", expr=expr), T0)
        assert nxt is not None and nxt.strftime("%a %d") == "Sun 07"


def test_cron_local_time_across_dst_in_new_york() -> None:
    daily = sched(kind="cron", expr="0 9 * * *", tz="America/New_York")
    found = times(daily, utc(2024, 3, 9, 0, 0), 3)
    assert found == [utc(2024, 3, 9, 14), utc(2024, 3, 10, 13), utc(2024, 3, 11, 13)]
    zone = ZoneInfo("America/New_York")
    assert {t.astimezone(zone).hour for t in found} == {9}


def test_cron_fixed_time_in_the_repeated_hour_fires_once() -> None:
    nightly = sched(kind="cron", expr="30 2 * * *", tz="Europe/Berlin")
    # 02:30 happens twice on 2024-10-27 (00:30 and 01:30 UTC): only the first one fires
    assert times(nightly, utc(2024, 10, 26, 12), 2) == [utc(2024, 10, 27, 0, 30),
                                                        utc(2024, 10, 28, 1, 30)]


def test_cron_hourly_fires_every_real_hour_across_fall_back() -> None:
    hourly = sched(kind="cron", expr="0 * * * *", tz="Europe/Berlin")
    found = times(hourly, utc(2024, 10, 26, 22, 30), 5)
    assert found == [utc(2024, 10, 26, 23), utc(2024, 10, 27, 0), utc(2024, 10, 27, 1),
                     utc(2024, 10, 27, 2), utc(2024, 10, 27, 3)]


def test_cron_time_in_the_skipped_hour_is_shifted_forward() -> None:
    nightly = sched(kind="cron", expr="30 2 * * *", tz="Europe/Berlin")
    found = times(nightly, utc(2024, 3, 30, 12), 2)
    assert found == [utc(2024, 3, 31, 1, 30), utc(2024, 4, 1, 0, 30)]  # 03:30 CEST, then 02:30
    hourly = sched(kind="cron", expr="0 * * * *", tz="Europe/Berlin")
    assert times(hourly, utc(2024, 3, 30, 23, 30), 3) == [
        utc(2024, 3, 31, 0), utc(2024, 3, 31, 1), utc(2024, 3, 31, 2)]  # no duplicate


def test_impossible_cron_never_fires() -> None:
    assert next_fire_time(sched(kind="cron", expr="0 0 30 2 *"), T0) is None


# ----------------------------------------------------------------- store


async def add_job(service: CronService, schedule: Schedule, *, chat: ChatRef = CHAT,
                  text: str = "check the plants") -> Job:
    return await service.add_job(name="", schedule=schedule, chat=chat, text=text)


async def test_store_persists_in_the_documented_format(tmp_path: Path) -> None:
    service = make_service(tmp_path, Clock())
    job = await add_job(service, sched(kind="every", every_s=60, tz="Europe/Berlin"))
    raw = json.loads(service.store.path.read_text())
    assert raw["version"] == 1
    stored = raw["jobs"][job.id]
    assert stored == {
        "id": job.id, "name": "check the plants",
        "schedule": {"kind": "every", "every_s": 60, "tz": "Europe/Berlin"},
        "payload": {"kind": "agent_turn",
                    "chat": {"provider": "telegram", "chat_id": "42", "thread_id": None},
                    "text": "check the plants"},
        "enabled": True, "created_at": "2024-01-01T12:00:00+00:00",
        "state": {"last_error": None, "last_run_at": None, "last_status": None,
                  "next_run_at": "2024-01-01T12:01:00+00:00", "runs": 0},
    }
    reloaded = FileCronStore(service.store.path)
    assert reloaded.list() == [job]


def test_store_operations(tmp_path: Path) -> None:
    store = FileCronStore(tmp_path / "cron-store.json")
    job = Job("job_a", "a", sched(kind="every", every_s=60), CHAT, "hi", created_at="1")
    other = Job("job_b", "b", sched(kind="every", every_s=60), ChatRef("slack", "C1"), "yo",
                created_at="2")
    store.add(job)
    store.add(other)
    with pytest.raises(ValueError, match="already exists"):
        store.add(job)
    assert [j.id for j in store.list()] == ["job_a", "job_b"]
    assert [j.id for j in store.list("slack:C1")] == ["job_b"]
    assert not store.enable("job_a", False).enabled
    updated = store.update_state("job_a", runs=3, last_status=CronRunStatus.OK)
    assert updated.state == JobState(runs=3, last_status=CronRunStatus.OK)
    assert FileCronStore(store.path).get("job_a").state.last_status is CronRunStatus.OK  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="unknown job state field"):
        store.update_state("job_a", colour="red")
    with pytest.raises(KeyError):
        store.enable("nope", True)
    assert store.remove("job_b") is not None and store.remove("job_b") is None
    reloaded = FileCronStore(store.path)
    assert reloaded.list() == [updated] and not reloaded.get("job_a").enabled  # type: ignore[union-attr]


def test_corrupt_store_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "cron-store.json"
    path.write_text("{not json")
    store = FileCronStore(path)
    assert store.list() == []
    assert [p.name.startswith("cron-store.json.corrupt-") for p in tmp_path.iterdir()] == [True]
    path.write_text(json.dumps({"version": 99, "jobs": {}}))
    assert FileCronStore(path).list() == [] and not path.exists()


def test_one_invalid_job_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "cron-store.json"
    service = make_service(tmp_path, Clock())
    good = asyncio.run(add_job(service, sched(kind="every", every_s=60)))
    raw = json.loads(service.store.path.read_text())
    raw["jobs"]["job_bad"] = {"id": "job_bad", "schedule": {"kind": "every", "every_s": 1}}
    path.write_text(json.dumps(raw))
    store = FileCronStore(path)
    assert store.list() == [good]
    assert json.loads(path.read_text())["jobs"].keys() == {good.id}  # rewritten, valid
    moved = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(moved) == 1 and "job_bad" in moved[0].read_text()


# ----------------------------------------------------------------- service


async def test_due_jobs_fire_and_advance(tmp_path: Path) -> None:
    clock, fired = Clock(), Fired()
    service = make_service(tmp_path, clock, fired)
    job = await add_job(service, sched(kind="every", every_s=60))
    assert await service.run_due() == []
    clock.advance(60)
    assert [(j.id, t) for j, t in await service.run_due()] == [(job.id, utc(2024, 1, 1, 12, 1))]
    assert await service.run_due() == []  # once per occurrence
    clock.advance(60)
    await service.run_due()
    assert fired.calls == [(job.id, utc(2024, 1, 1, 12, 1)), (job.id, utc(2024, 1, 1, 12, 2))]
    state = service.store.get(job.id).state  # type: ignore[union-attr]
    assert (state.runs, state.last_status) == (2, "ok")
    assert state.next_run_at == "2024-01-01T12:03:00+00:00"
    assert state.last_run_at == "2024-01-01T12:02:00+00:00"


async def test_missed_fire_on_boot_fires_once_then_keeps_the_schedule(tmp_path: Path) -> None:
    clock, fired = Clock(), Fired()
    job = await add_job(make_service(tmp_path, clock), sched(kind="every", every_s=60))
    clock.advance(3600 + 30)  # the daemon was down for an hour (60 periods)
    service = make_service(tmp_path, clock, fired)  # boot: a fresh store and service
    await service.run_due()
    assert fired.calls == [(job.id, utc(2024, 1, 1, 12, 1))]  # the first missed time, once
    assert service.store.get(job.id).state.next_run_at == "2024-01-01T13:01:00+00:00"  # type: ignore[union-attr]
    assert await service.run_due() == []


async def test_at_job_fires_once_and_disables_itself(tmp_path: Path) -> None:
    clock, fired = Clock(), Fired()
    service = make_service(tmp_path, clock, fired)
    job = await add_job(service, sched(kind="at", at="2024-01-01T12:05:00Z"))
    clock.advance(600)
    await service.run_due()
    clock.advance(600)
    await service.run_due()
    assert fired.calls == [(job.id, utc(2024, 1, 1, 12, 5))]
    stored = service.store.get(job.id)
    assert stored is not None and not stored.enabled and stored.state.next_run_at is None
    with pytest.raises(ValueError, match="never fire again"):
        await service.set_enabled(job.id, True)
    with pytest.raises(ValueError, match="in the past"):
        await add_job(service, sched(kind="at", at="2024-01-01T12:00:00Z"))


async def test_disabled_jobs_do_not_fire_and_reenable_without_catch_up(tmp_path: Path) -> None:
    clock, fired = Clock(), Fired()
    service = make_service(tmp_path, clock, fired)
    job = await add_job(service, sched(kind="every", every_s=60))
    await service.set_enabled(job.id, False)
    clock.advance(600)
    assert await service.run_due() == [] and fired.calls == []
    enabled = await service.set_enabled(job.id, True)
    assert enabled.state.next_run_at == "2024-01-01T12:11:00+00:00"
    assert await service.run_due() == []


async def test_a_job_changed_while_it_fires_keeps_the_change(tmp_path: Path) -> None:
    clock = Clock()
    service: CronService

    async def fire(job: Job, scheduled: datetime) -> None:
        if job.text == "disable me":
            await service.set_enabled(job.id, False)
        else:
            await service.remove_job(job.id)

    service = make_service(tmp_path, clock, fire)
    disabled = await add_job(service, sched(kind="every", every_s=60), text="disable me")
    await add_job(service, sched(kind="every", every_s=60), text="remove me")
    clock.advance(60)
    assert len(await service.run_due()) == 2
    [left] = await service.list_jobs()
    assert left.id == disabled.id and not left.enabled and left.state.next_run_at is None
    assert left.state.runs == 1


async def test_a_failing_fire_is_recorded_and_the_others_still_fire(tmp_path: Path) -> None:
    clock, fired = Clock(), Fired()

    def fire(job: Job, scheduled: datetime) -> None:
        if job.text == "boom":
            raise RuntimeError("journal full")
        fired(job, scheduled)

    service = make_service(tmp_path, clock, fire)
    bad = await add_job(service, sched(kind="every", every_s=60), text="boom")
    good = await add_job(service, sched(kind="every", every_s=60))
    clock.advance(60)
    await service.run_due()
    assert [c[0] for c in fired.calls] == [good.id]
    state = service.store.get(bad.id).state  # type: ignore[union-attr]
    assert (state.last_status, state.last_error) == (CronRunStatus.ERROR,
                                                     "RuntimeError: journal full")
    assert state.last_result == "error: RuntimeError: journal full"
    assert state.next_run_at == "2024-01-01T12:02:00+00:00"


async def test_async_fire_is_awaited(tmp_path: Path) -> None:
    clock, seen = Clock(), []

    async def fire(job: Job, scheduled: datetime) -> None:
        await asyncio.sleep(0)
        seen.append(job.id)

    service = make_service(tmp_path, clock, fire)
    job = await add_job(service, sched(kind="every", every_s=60))
    clock.advance(60)
    await service.run_due()
    assert seen == [job.id]


async def test_crash_between_fire_and_save_refires_the_same_message(tmp_path: Path) -> None:
    clock = Clock()
    journal = InboundJournal(tmp_path / "inbound.jsonl")
    accepted: list[str] = []

    def crash_after_journaling(job: Job, scheduled: datetime) -> None:
        if journal.accept(cron_inbound_message(job, scheduled)):
            accepted.append(job.id)
        raise SystemExit("kill -9")  # not an Exception: the state is never saved

    job = await add_job(make_service(tmp_path, clock), sched(kind="every", every_s=60))
    clock.advance(61)
    with pytest.raises(SystemExit):
        await make_service(tmp_path, clock, crash_after_journaling).run_due()

    def deliver(job: Job, scheduled: datetime) -> None:
        if journal.accept(cron_inbound_message(job, scheduled)):
            accepted.append(job.id)

    rebooted = make_service(tmp_path, clock, deliver)
    assert len(await rebooted.run_due()) == 1  # fired again after the "crash"...
    assert accepted == [job.id]  # ...but the journal dropped the duplicate
    journal.close()


async def test_cron_inbound_message(tmp_path: Path) -> None:
    service = make_service(tmp_path, Clock())
    job = await service.add_job(name="standup", schedule=sched(kind="every", every_s=60),
                          chat=ChatRef("slack", "C1", "171.5"), text="Post the standup note.")
    message = cron_inbound_message(job, utc(2024, 1, 1, 12, 1))
    assert (message.provider, message.chat_id, message.thread_id) == ("slack", "C1", "171.5")
    assert message.message_id == f"cron-{job.id}-1704110460"
    assert (message.sender_id, message.text, message.is_mention) == (
        "cron", "Post the standup note.", True)
    assert message.cron == CronOccurrence(job.id, "2024-01-01T12:01:00+00:00")
    assert message.to_dict()["metadata"] == {  # as the inbound journal always held it
        "origin": "cron", "cron_job_id": job.id, "scheduled_at": "2024-01-01T12:01:00+00:00"}
    assert message.key == f"slack:C1:cron-{job.id}-1704110460"


async def test_per_chat_limit_and_text_checks(tmp_path: Path) -> None:
    service = make_service(tmp_path, Clock(), max_jobs_per_chat=3)
    for _ in range(3):
        await add_job(service, sched(kind="every", every_s=60))
    with pytest.raises(ValueError, match="already has 3 cron jobs"):
        await add_job(service, sched(kind="every", every_s=60))
    await add_job(service, sched(kind="every", every_s=60), chat=ChatRef("slack", "C9"))
    with pytest.raises(ValueError, match="empty"):
        await add_job(service, sched(kind="every", every_s=60), chat=ChatRef("x", "y"), text="  ")


async def test_sleep_is_until_the_earliest_job_and_at_most_a_minute(tmp_path: Path) -> None:
    clock = Clock()
    service = make_service(tmp_path, clock)
    assert service.seconds_until_next() == 60
    await add_job(service, sched(kind="every", every_s=3600))
    assert service.seconds_until_next() == 60
    await add_job(service, sched(kind="every", every_s=15))
    assert service.seconds_until_next() == 15
    clock.advance(20)
    assert service.seconds_until_next() == 0


async def test_reconcile_fills_in_a_missing_next_time(tmp_path: Path) -> None:
    clock = Clock()
    service = make_service(tmp_path, clock)
    job = await add_job(service, sched(kind="every", every_s=60))
    service.store.update_state(job.id, next_run_at=None)
    clock.advance(30)
    assert service.reconcile() == 1
    assert service.store.get(job.id).state.next_run_at == "2024-01-01T12:01:00+00:00"  # type: ignore[union-attr]


class StopLoop(Exception):
    pass


async def test_run_loop_sleeps_and_fires_on_time(tmp_path: Path) -> None:
    clock, fired, delays = Clock(), Fired(), []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) > 4:
            raise StopLoop
        clock.advance(seconds)

    service = make_service(tmp_path, clock, fired, sleep=fake_sleep)
    job = await add_job(service, sched(kind="every", every_s=25))
    service._changed.clear()  # the add above would otherwise end the first sleep early
    with pytest.raises(StopLoop):
        await service.run()
    assert delays == [25, 25, 25, 25, 25]
    assert fired.calls == [(job.id, T0 + timedelta(seconds=25 * n)) for n in (1, 2, 3, 4)]


async def test_run_loop_wakes_up_when_jobs_change(tmp_path: Path) -> None:
    clock, delays = Clock(), []
    released = asyncio.Event()

    async def blocking_sleep(seconds: float) -> None:
        delays.append(seconds)
        await released.wait()

    async def settle() -> None:
        for _ in range(50):  # only event-loop turns: no real time passes
            await asyncio.sleep(0)

    service = make_service(tmp_path, clock, sleep=blocking_sleep)
    task = asyncio.create_task(service.run())
    await settle()
    assert delays == [60]
    await add_job(service, sched(kind="every", every_s=10))
    await settle()
    assert delays == [60, 10]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_status_stored_before_the_enum_still_loads(tmp_path: Path) -> None:
    """Stores written by earlier versions hold "error: <what>" in last_status."""
    store = FileCronStore(tmp_path / "cron-store.json")
    store.add(Job("job_a", "a", sched(kind="every", every_s=60), CHAT, "hi", created_at="1"))
    raw = json.loads(store.path.read_text())
    raw["jobs"]["job_a"]["state"].update(last_status="error: OSError: disk full")
    del raw["jobs"]["job_a"]["state"]["last_error"]
    store.path.write_text(json.dumps(raw))
    state = FileCronStore(store.path).get("job_a").state  # type: ignore[union-attr]
    assert (state.last_status, state.last_error) == (CronRunStatus.ERROR, "OSError: disk full")
