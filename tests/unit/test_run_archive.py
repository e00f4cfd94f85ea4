"""The file run journal's archive is capped: the newest days, within a byte budget."""

from __future__ import annotations

from pathlib import Path

from soulflow.backends.file.runs import prune_archive


def _day(directory: Path, day: int, size: int) -> Path:
    path = directory / f"2026-11-{day:02d}.jsonl"
    path.write_bytes(b"x" * size)
    return path


def test_only_the_newest_days_are_kept(tmp_path: Path) -> None:
    for day in range(1, 11):
        _day(tmp_path, day, 10)
    deleted = prune_archive(tmp_path, days=7, max_bytes=10_000)
    assert sorted(p.name for p in deleted) == [f"2026-11-{d:02d}.jsonl" for d in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "2026-11-04.jsonl"


def test_past_the_byte_budget_older_days_go_but_the_newest_always_stays(tmp_path: Path) -> None:
    _day(tmp_path, 1, 300)
    _day(tmp_path, 2, 300)
    _day(tmp_path, 3, 500)
    assert [p.name for p in prune_archive(tmp_path, days=7, max_bytes=800)] == [
        "2026-11-01.jsonl"]
    assert [p.name for p in prune_archive(tmp_path, days=7, max_bytes=100)] == [
        "2026-11-02.jsonl"]
    assert [p.name for p in tmp_path.iterdir()] == ["2026-11-03.jsonl"]
    (tmp_path / "notes.txt").write_text("not an archive day")
    assert prune_archive(tmp_path, days=0, max_bytes=0) == []  # the newest day stays
