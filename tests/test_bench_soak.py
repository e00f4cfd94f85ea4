"""bench/soak.py's schedule and steady window, and bench/soak_plot.py's restart marks (the
parts that need no daemon; a short real run is `python bench/soak.py --duration 60`)."""

from __future__ import annotations

import pytest

from bench.soak import Restart, parse_restarts, steady_window
from bench.soak_plot import restart_minutes


def test_auto_restarts_fill_the_caches_before_the_window_and_restart_near_the_end() -> None:
    assert parse_restarts("auto", 7200) == [Restart(3, "kill"), Restart(6, "term"),
                                            Restart(110, "kill")]
    assert parse_restarts("auto", 1800) == [Restart(3, "kill"), Restart(6, "term")]
    assert parse_restarts("auto", 60) == [Restart(0.2, "kill"), Restart(0.4, "term")]
    assert parse_restarts("6:term,3:kill", 60) == [Restart(3, "kill"), Restart(6, "term")]
    assert parse_restarts("none", 7200) == []
    with pytest.raises(ValueError, match="say kill or term"):
        parse_restarts("3:stop", 60)


def report(minute: float, life: int, rss: float) -> dict[str, float | int]:
    return {"minute": minute, "life": life, "rss_mib": rss, "fds": 50, "connections": 20,
            "tasks": 30}


def test_the_steady_window_is_the_life_running_at_its_start_to_its_last_report() -> None:
    reports = [report(m, 1 if m < 5 else 2 if m < 30 else 3, 80.0 + m / 10)
               for m in range(1, 40)]
    window = steady_window(reports, 15)
    assert window is not None
    assert (window["life"], window["from_minute"], window["to_minute"]) == (2, 15, 29)
    assert window["rss_growth_mib"] == pytest.approx(1.4)
    assert steady_window(reports, 60) is None


def test_restarts_are_marked_when_they_happened_even_before_the_first_report() -> None:
    rows = [report(1, 2, 80), report(2, 2, 80), report(3, 3, 80)]
    assert restart_minutes(rows, {"restarts": ["kill@0.2", "term@2.5"]}) == [0.2, 2.5]
    assert restart_minutes(rows, None) == [3]  # a run cut short: where a new life shows
