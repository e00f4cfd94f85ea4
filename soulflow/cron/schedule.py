"""Cron schedules: what they look like, how they are validated, and when they fire next.

Three kinds, each with an IANA time zone (default UTC):

* ``at``    - once, at an ISO 8601 datetime (a time without an offset is read in ``tz``);
* ``every`` - every ``every_s`` seconds (at least `MIN_EVERY_S`), counted in absolute time so
  daylight-saving changes never stretch or shrink an interval;
* ``cron``  - a classic 5-field crontab expression, evaluated in ``tz`` wall-clock time.

APScheduler 3.x is used only for its trigger arithmetic, never for its scheduler. Two of its
3.x behaviours are corrected here because they would surprise a crontab user or hang the
daemon: `CronTrigger.from_crontab` numbers weekdays from Monday (crontab: 0 and 7 are Sunday),
and around a fall-back DST change its "next time after X" can return X again. So cron times
are computed on wall-clock times (a UTC trigger fed naive local times) and mapped to real
instants here, where the repeated and the skipped hour are handled explicitly:

* a wall time skipped by a spring-forward change fires once, shifted forward by the gap;
* a wall time repeated by a fall-back change fires once for expressions with a fixed hour
  (``30 2 * * *``) and twice for hour-wildcard ones (``0 * * * *``, really two hours apart),
  like Vixie cron.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

__all__ = [
    "KINDS",
    "MAX_EVERY_S",
    "MIN_EVERY_S",
    "Schedule",
    "from_iso",
    "next_fire_time",
    "to_iso",
]

ScheduleKind = Literal["at", "every", "cron"]
KINDS: tuple[str, ...] = ("at", "every", "cron")
MIN_EVERY_S = 10
MAX_EVERY_S = 10 * 366 * 24 * 3600  # beyond this a timedelta overflow is closer than any use
_DST_MARGIN = timedelta(hours=3)  # larger than any real DST shift (at most 2 h)
_MAX_CRON_STEPS = 2000  # bounds one next-time search even for every-minute expressions
_ONE_TICK = timedelta(microseconds=1)

_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_WEEKDAY_NUMBERS = {name: number for number, name in enumerate(_WEEKDAY_NAMES)}
_DOW_TOKEN = re.compile(r"(?P<base>\*|[0-7a-z]+(?:-[0-7a-z]+)?)(?:/(?P<step>\d+))?")


def to_iso(moment: datetime | None) -> str | None:
    """An aware datetime as an ISO 8601 UTC string (the store's only time format)."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def from_iso(text: str | None) -> datetime | None:
    """Parse what `to_iso` wrote; None for None. Naive values are taken as UTC."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule; build it with `Schedule.from_dict` so it is always usable."""

    kind: ScheduleKind
    tz: str = "UTC"
    at: str | None = None
    every_s: int | None = None
    expr: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """Validate ``{kind, at|every_s|expr, tz?}``; a ValueError says exactly what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("a schedule must be an object like {\"kind\": \"every\", "
                             "\"every_s\": 3600}")
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"schedule kind must be one of {', '.join(KINDS)}, got {kind!r}")
        tz = data.get("tz") or "UTC"
        zone = _zone(tz)
        if kind == "at":
            at = _parse_at(data.get("at"), zone, tz)
            DateTrigger(run_date=at, timezone=zone)
            return cls("at", tz, at=at.isoformat())
        if kind == "every":
            every = _parse_every(data.get("every_s"))
            IntervalTrigger(seconds=every, timezone=zone)
            return cls("every", tz, every_s=every)
        expr = data.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            raise ValueError("a cron schedule needs expr, a 5-field crontab expression such as "
                             "'0 9 * * 1-5' (minute hour day-of-month month day-of-week)")
        expr = " ".join(expr.split())
        _crontab_trigger(expr, tz)  # validates, with the zone as APScheduler sees it
        return cls("cron", tz, expr=expr)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: only the field the kind uses, plus tz."""
        value = {"at": self.at, "every": self.every_s, "cron": self.expr}[self.kind]
        key = {"at": "at", "every": "every_s", "cron": "expr"}[self.kind]
        return {"kind": self.kind, key: value, "tz": self.tz}

    def describe(self) -> str:
        """A short human description, e.g. ``every 1h (UTC)`` or ``cron '0 9 * * *' (...)``."""
        if self.kind == "at":
            return f"once at {self.at} ({self.tz})"
        if self.kind == "every":
            return f"every {_duration(self.every_s or 0)} ({self.tz})"
        return f"cron '{self.expr}' ({self.tz})"


def next_fire_time(schedule: Schedule, after: datetime,
                   *, anchor: datetime | None = None) -> datetime | None:
    """The first fire time strictly after ``after`` (UTC), or None if it never fires again.

    ``anchor`` fixes the phase of ``every`` schedules (fire times are anchor + k * every_s);
    it defaults to ``after``, which makes the next time simply ``after + every_s``. The
    service passes the previous scheduled time, so catching up after downtime keeps the phase.
    """
    if after.tzinfo is None:
        raise ValueError("next_fire_time needs an aware datetime")
    after = after.astimezone(UTC)
    if schedule.kind == "at":
        at = from_iso(schedule.at)
        return at if at is not None and at > after else None
    if schedule.kind == "every":
        start = (anchor or after).astimezone(UTC)
        trigger = IntervalTrigger(seconds=schedule.every_s or MIN_EVERY_S, start_date=start,
                                  timezone=UTC)
        found = trigger.get_next_fire_time(None, after + _ONE_TICK)
        return found.astimezone(UTC) if found is not None else None
    return _next_cron(schedule.expr or "", schedule.tz, after)


# ----------------------------------------------------------------- validation helpers


def _zone(tz: Any) -> ZoneInfo:
    if not isinstance(tz, str):
        raise ValueError(f"tz must be an IANA time zone name such as 'Europe/Berlin', got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}; use an IANA name such as 'UTC', "
                         "'Europe/Berlin' or 'America/New_York'") from None


def _parse_at(value: Any, zone: ZoneInfo, tz: str) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("an 'at' schedule needs at, an ISO 8601 datetime such as "
                         "'2030-01-31T09:00:00+01:00' (without an offset it is read in tz)")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"at {value!r} is not an ISO 8601 datetime; write it like "
                         "'2030-01-31T09:00:00' or '2030-01-31T09:00:00+01:00'") from None
    if moment.tzinfo is not None:
        return moment
    local = moment.replace(tzinfo=zone)
    if local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != moment:
        raise ValueError(f"{value} does not exist in {tz}: the clocks skip that time for "
                         "daylight saving; pick a time outside the skipped hour")
    return local  # an ambiguous (repeated) time means its first occurrence (fold=0)


def _parse_every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"an 'every' schedule needs every_s, a number of seconds "
                         f"(at least {MIN_EVERY_S}), got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"every_s must be a whole number of seconds, got {value}")
    seconds = int(value)
    if seconds < MIN_EVERY_S:
        raise ValueError(f"every_s must be at least {MIN_EVERY_S} seconds, got {seconds}")
    if seconds > MAX_EVERY_S:
        raise ValueError(f"every_s must be at most {MAX_EVERY_S} seconds (about ten years)")
    return seconds


def _crontab_trigger(expr: str, tz: str | ZoneInfo) -> CronTrigger:
    """`CronTrigger.from_crontab` with crontab weekday numbers and clear error messages."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"cron expression {expr!r} has {len(fields)} field(s); it needs 5: "
                         "minute hour day-of-month month day-of-week (e.g. '30 8 * * 1-5')")
    if fields[2] not in ("*", "?") and fields[4] not in ("*", "?"):
        raise ValueError(f"cron expression {expr!r} restricts both day-of-month and "
                         "day-of-week; classic cron fires when either matches and this "
                         "scheduler only when both do, so set just one of them")
    fields = [("*" if f == "?" else f) for f in fields]
    fields[4] = _crontab_weekdays(fields[4], expr)
    try:
        return CronTrigger.from_crontab(" ".join(fields), timezone=tz)
    except ValueError as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None


def _crontab_weekdays(field: str, expr: str) -> str:
    """Rewrite a crontab day-of-week field (0/7 = Sunday) as names APScheduler 3 reads right."""
    if field == "*":
        return field
    days: set[int] = set()
    for token in field.lower().split(","):
        match = _DOW_TOKEN.fullmatch(token)
        if match is None:
            raise ValueError(f"invalid day-of-week {token!r} in cron expression {expr!r}")
        base, step = match["base"], int(match["step"] or 1)
        if step < 1:
            raise ValueError(f"invalid step in day-of-week {token!r} of {expr!r}")
        if base == "*":
            first, last = 0, 6
        elif "-" in base:
            first, last = (_weekday(part, expr) for part in base.split("-"))
            if first > last:
                raise ValueError(f"day-of-week range {base!r} in {expr!r} must go from low "
                                 "to high (0 and 7 are Sunday, 1 is Monday)")
        else:
            first = _weekday(base, expr)
            last = 6 if match["step"] else first
        days.update(day % 7 for day in range(first, last + 1, step))
    return ",".join(_WEEKDAY_NAMES[day] for day in sorted(days))


def _weekday(text: str, expr: str) -> int:
    """0-7 as written (7 is Sunday again, reduced later) or a three-letter name."""
    if text.isdigit() and int(text) <= 7:
        return int(text)
    if text in _WEEKDAY_NUMBERS:
        return _WEEKDAY_NUMBERS[text]
    raise ValueError(f"invalid day-of-week {text!r} in cron expression {expr!r}: use 0-7 "
                     "(0 and 7 are Sunday) or sun, mon, tue, wed, thu, fri, sat")


@functools.lru_cache(maxsize=256)
def _wall_trigger(expr: str) -> CronTrigger:
    """The expression evaluated on naive wall-clock times (dressed as UTC: no DST at all)."""
    return _crontab_trigger(expr, ZoneInfo("UTC"))


@functools.lru_cache(maxsize=64)
def _cached_zone(tz: str) -> ZoneInfo:
    return _zone(tz)


# ----------------------------------------------------------------- cron arithmetic


def _next_cron(expr: str, tz: str, after: datetime) -> datetime | None:
    """First instant > ``after`` matching ``expr`` in ``tz`` wall time (see module docstring).

    Wall times are scanned in order and mapped to instants. Only near a fall-back change can
    a later wall time be an earlier instant, so the scan looks back and past the first hit by
    `_DST_MARGIN` only when the UTC offset changes around there.
    """
    zone = _cached_zone(tz)
    trigger = _wall_trigger(expr)
    fixed_hour = expr.split()[1] != "*"
    look_back = _offset(zone, after) != _offset(zone, after + _DST_MARGIN)
    probe = _wall(after, zone) - (_DST_MARGIN if look_back else timedelta(0))
    best: datetime | None = None
    best_wall: datetime | None = None
    for _ in range(_MAX_CRON_STEPS):
        found = trigger.get_next_fire_time(None, probe.replace(tzinfo=UTC))
        if found is None:
            break
        wall = found.replace(tzinfo=None)
        if best_wall is not None and wall > best_wall + _DST_MARGIN:
            break
        for instant in _instants(wall, zone, fixed_hour):
            if instant > after and (best is None or instant < best):
                best, best_wall = instant, wall
        if best is not None and _offset(zone, best - _DST_MARGIN) == _offset(zone, best):
            break  # no DST change just before the hit: no later wall time can beat it
        probe = wall + _ONE_TICK
    return best


def _instants(wall: datetime, zone: ZoneInfo, fixed_hour: bool) -> list[datetime]:
    """The UTC instants a local wall time stands for: one, two (repeated hour) or one shifted
    forward past a skipped hour (fold=0 reads it with the offset from before the change)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    repeated = _wall(first, zone) == wall and _wall(second, zone) == wall
    if repeated and not fixed_hour:
        return [first, second]
    return [first]


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta | None:
    return moment.astimezone(zone).utcoffset()


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
