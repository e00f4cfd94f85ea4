"""bench/soak.py's schedule, its bookkeeping (bench/_soak_tally.py) and bench/soak_plot.py's
restart marks: the parts that need no daemon (a short real run is `python bench/soak.py
--duration 60 --rate 2`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench._soak_tally import JournalStatuses, LocalChats, session_statuses, steady_window
from bench.soak import Restart, parse_restarts
from bench.soak_plot import restart_minutes


def test_auto_restarts_fill_the_caches_before_the_window_and_restart_near_the_end() -> None:
    assert parse_restarts("auto", 7200) == [Restart(1, "kill"), Restart(2, "term"),
                                            Restart(110, "kill")]
    assert parse_restarts("auto", 1800) == [Restart(1, "kill"), Restart(2, "term")]
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


def write_lines(path: Path, records: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)


def test_local_answers_are_counted_from_the_transcripts_as_they_grow(tmp_path: Path) -> None:
    chats = LocalChats(tmp_path, chats=2, posted={1, 2, 3})
    transcript = tmp_path / "runtime" / "local" / "soak-0.jsonl"
    write_lines(transcript, [{"role": "user", "content": "soak 1"},
                             {"role": "assistant", "content": "echo: soak 1 and soak 2"}])
    assert chats.tally()["missing"] == [3]
    write_lines(transcript, [{"role": "assistant", "content": "echo: soak 1"}])
    counts = chats.tally(full=True)
    assert (counts["answered"], counts["duplicates"], counts["missing"]) == (2, [1], [3])
    chats.close()


def test_the_journal_says_how_each_number_ended_across_a_compaction(tmp_path: Path) -> None:
    path = tmp_path / "inbound.jsonl"
    message = {"provider": "telegram", "chat_id": "c", "message_id": "m7", "text": "soak 7"}
    write_lines(path, [{"op": "in", "msg": message}])
    statuses = JournalStatuses(path)
    statuses.refresh()
    assert statuses.status == {}
    path.unlink()  # a compaction writes a new file
    write_lines(path, [{"op": "in", "msg": message},
                       {"op": "done", "key": "telegram:c:m7", "status": "cancelled"}])
    statuses.refresh()
    assert statuses.status == {7: "cancelled"}


def test_a_stop_the_journal_no_longer_shows_is_found_in_the_session(tmp_path: Path) -> None:
    """A compaction took the journal's entries of a message a `/stop` cancelled; its session
    still says so, for a folded turn's every number too."""
    write_lines(tmp_path / "discord%3A9.jsonl", [
        {"role": "user", "content": "soak 41", "inbound_key": "discord:9:1"},
        {"role": "assistant", "content": "Stopped.", "inbound_key": "discord:9:1",
         "status": "cancelled"},
        {"role": "user", "content": "[1] Alice: soak 42\n[2] Alice: soak 43",
         "inbound_key": "discord:9:2"},
        {"role": "assistant", "content": "echo", "inbound_key": "discord:9:2",
         "status": "answered"}])
    assert session_statuses(tmp_path, {41, 43, 44}) == {41: "cancelled", 43: "answered"}
