"""The file run journal's archive is capped: the newest days, within a byte budget."""

from __future__ import annotations

from pathlib import Path

from soulflow.agent.run import events as ev
from soulflow.backends.file.runs import ARCHIVE_CHUNK, FileRunJournal, prune_archive
from soulflow.contracts import ChatRef


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


def test_a_compaction_archives_every_finished_run_in_order_chunk_by_chunk(
        tmp_path: Path) -> None:
    """More finished records than one chunk: all reach the archive, in journal order, and
    the journal keeps only the unfinished run."""
    journal = FileRunJournal(tmp_path / "runs", fsync="never")
    finished = [f"run_{n:05d}" for n in range(ARCHIVE_CHUNK + 250)]
    chat = ChatRef("local", "c")
    def started(run_id: str) -> ev.Event:
        return ev.Event(ev.RUN_STARTED, {"run_id": run_id, "chat": chat.to_dict(),
                                         "text": "x", "history": []})

    journal.append("run_open", started("run_open"))
    for run_id in finished:
        journal.append(run_id, started(run_id))
        journal.append(run_id, ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "done"}))
    journal.compact()
    journal.close()
    [archive] = (tmp_path / "runs" / "archive").iterdir()
    archived = [line for line in archive.read_text().splitlines() if line]
    assert len(archived) == 2 * len(finished)
    runs = list(dict.fromkeys(line.split('"run":"')[1].split('"')[0] for line in archived))
    assert runs == finished
    kept = (tmp_path / "runs" / "journal.jsonl").read_text().splitlines()
    assert [line for line in kept if line] and all('"run_open"' in line for line in kept if line)
