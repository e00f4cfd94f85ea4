"""storage/: atomic JSON, JSONL journals (torn lines, tail, concurrency), workspace lock."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from soulflow.storage.append import append_text
from soulflow.storage.atomic import create_exclusive, read_json, write_json_atomic
from soulflow.storage.background import BackgroundJsonFile
from soulflow.storage.jsonl import JsonlFile
from soulflow.storage.lock import WorkspaceLock, WorkspaceLocked


def test_write_json_atomic_round_trip_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    write_json_atomic(path, {"a": 1, "text": "한국어"})
    write_json_atomic(path, {"a": 2})
    assert read_json(path, None) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_read_json_missing_file_gives_default(tmp_path: Path) -> None:
    assert read_json(tmp_path / "nope.json", {"empty": True}) == {"empty": True}


@pytest.mark.parametrize("content", [b"", b"   \n", b"{not json", b"\xff\xfe\x00"])
def test_corrupt_or_empty_json_is_moved_aside_with_a_log_line(
        tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "index.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR):
        assert read_json(path, {"fresh": True}) == {"fresh": True}
    aside = list(tmp_path.glob("index.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content  # the data is kept
    assert not path.exists()
    assert "moved it aside" in caplog.text and str(aside[0]) in caplog.text


def test_jsonl_append_and_read(tmp_path: Path) -> None:
    journal = JsonlFile(tmp_path / "j.jsonl")
    journal.append({"n": 1})
    journal.append_many([{"n": 2}, {"n": 3}])
    assert [r["n"] for r in journal.read_all()] == [1, 2, 3]
    journal.close()


def test_torn_last_line_is_skipped_and_repaired(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\n{"n":2}\n{"n":3, "tor')
    journal = JsonlFile(path)
    with caplog.at_level(logging.WARNING):
        assert [r["n"] for r in journal.read_all()] == [1, 2]
    assert path.read_bytes() == b'{"n":1}\n{"n":2}\n'
    assert "torn last line" in caplog.text
    journal.append({"n": 4})  # appends start on a clean line
    assert [r["n"] for r in JsonlFile(path).read_all()] == [1, 2, 4]


def test_zero_byte_and_missing_jsonl(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert JsonlFile(tmp_path / "empty.jsonl").read_all() == []
    assert JsonlFile(tmp_path / "missing.jsonl").read_all() == []
    assert JsonlFile(tmp_path / "missing.jsonl").tail(5) == []


def test_garbage_line_in_the_middle_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\ngarbage\n[1,2]\n{"n":2}\n')
    assert [r["n"] for r in JsonlFile(path).read_all()] == [1, 2]


@pytest.mark.parametrize("count", [0, 1, 5, 50, 2000])
def test_tail_returns_the_last_records(tmp_path: Path, count: int) -> None:
    journal = JsonlFile(tmp_path / "j.jsonl")
    journal.append_many({"n": i, "pad": "x" * (i % 300)} for i in range(3000))
    assert [r["n"] for r in journal.tail(count)] == list(range(3000 - count, 3000))


def test_tail_of_short_file_and_torn_end(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\n{"n":2}\n{"n":')
    assert [r["n"] for r in JsonlFile(path).tail(10)] == [1, 2]


def test_concurrent_appends_from_threads_never_interleave(tmp_path: Path) -> None:
    journal = JsonlFile(tmp_path / "j.jsonl")

    def writer(worker: int) -> None:
        for i in range(500):
            journal.append({"w": worker, "i": i, "pad": "y" * 200})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = JsonlFile(tmp_path / "j.jsonl").read_all()
    assert len(records) == 4000
    for worker in range(8):
        assert [r["i"] for r in records if r["w"] == worker] == list(range(500))


def _append_in_process(path: str, worker: int) -> None:
    journal = JsonlFile(Path(path))
    for i in range(300):
        journal.append({"w": worker, "i": i, "pad": "z" * 500})
    journal.close()


def test_concurrent_appends_from_processes_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_in_process, args=(str(path), w)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    # a process that finds another's line half-written closes it with a newline rather than
    # cutting it, so an empty line may appear; no record may be lost or mangled
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    assert len(lines) == 1200
    assert all(json.loads(line)["pad"] == "z" * 500 for line in lines)


def test_rewrite_replaces_atomically(tmp_path: Path) -> None:
    journal = JsonlFile(tmp_path / "j.jsonl")
    journal.append_many({"n": i} for i in range(10))
    journal.rewrite([{"n": 42}])
    journal.append({"n": 43})
    assert [r["n"] for r in journal.read_all()] == [42, 43]


def test_fsync_policy_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync policy"):
        JsonlFile(tmp_path / "j.jsonl", fsync="sometimes")


def test_always_policy_syncs_each_record(tmp_path: Path) -> None:
    journal = JsonlFile(tmp_path / "j.jsonl", fsync="always")
    journal.append({"n": 1})
    journal.sync()
    assert journal.read_all() == [{"n": 1}]


def test_workspace_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    first = WorkspaceLock(tmp_path / "daemon.lock")
    first.acquire()
    second = WorkspaceLock(tmp_path / "daemon.lock")
    with pytest.raises(WorkspaceLocked, match=f"pid {os.getpid()}"):
        second.acquire()
    assert second.is_locked_by_other()
    first.release()
    assert not second.is_locked_by_other()
    with second:
        assert second.held


def test_background_json_file_reports_a_failed_write_and_refuses_after_close(
        tmp_path: Path) -> None:
    """A write that fails (here: the parent is a file) is logged and remembered, never raised
    into the event loop; the next value is tried again; a closed file takes no more values."""
    blocker = tmp_path / "blocked"
    blocker.write_text("not a directory")
    broken = BackgroundJsonFile(blocker / "state.json")
    broken.save({"a": 1})
    assert broken.flush(10)
    assert isinstance(broken.last_error, OSError)

    good = BackgroundJsonFile(tmp_path / "state.json")
    for value in range(50):
        good.save({"value": value})
    assert good.close(10)
    assert good.last_error is None
    assert read_json(tmp_path / "state.json", None) == {"value": 49}
    with pytest.raises(RuntimeError):
        good.save({"value": 50})


def test_create_exclusive_never_overwrites_and_sets_the_mode(tmp_path: Path) -> None:
    """The vault key's writer: created 0600 in one step, and a second creation is refused."""
    target = tmp_path / "security" / "master.key"
    create_exclusive(target, b"k" * 32, mode=0o600)
    assert target.read_bytes() == b"k" * 32 and (target.stat().st_mode & 0o777) == 0o600
    with pytest.raises(FileExistsError):
        create_exclusive(target, b"x" * 32)
    assert target.read_bytes() == b"k" * 32
    assert [p.name for p in target.parent.iterdir()] == ["master.key"]  # no temp left


def test_append_text_writes_the_header_once(tmp_path: Path) -> None:
    note = tmp_path / "memory" / "2026-01-01.md"
    append_text(note, "first\n\n", header="# 2026-01-01\n\n")
    append_text(note, "second\n\n", header="# 2026-01-01\n\n", fsync=True)
    assert note.read_text() == "# 2026-01-01\n\nfirst\n\nsecond\n\n"
