"""The inbound journal's seen ids on disk: a bounded cache in RAM, the redelivery window by
time, an old journal's ids migrated, and crash safety with the journal (kill -9 anywhere)."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from soulflow.backends.base import SEEN_WINDOW_S
from soulflow.backends.file.inbound import InboundJournal, seen_path
from soulflow.backends.redis.inbound import RedisInbound
from soulflow.backends.redis.outbox import RedisOutbox
from soulflow.contracts import InboundMessage
from soulflow.storage.keyset import EXPIRE_BATCH, ExpiringKeys

ROOT = Path(__file__).resolve().parents[2]


def inbound(i: int, chat: str = "c1") -> InboundMessage:
    return InboundMessage(provider="telegram", chat_id=chat, message_id=f"m{i}",
                          sender_id="u", text=f"hello {i}", received_at=1000.0 + i)


def test_the_window_covers_telegrams_24_hour_redelivery_on_both_backends() -> None:
    assert SEEN_WINDOW_S >= 24 * 3600
    for store in (InboundJournal, RedisInbound):
        assert inspect.signature(store).parameters["seen_ttl_s"].default == SEEN_WINDOW_S
    assert inspect.signature(RedisOutbox).parameters["answered_ttl_s"].default == SEEN_WINDOW_S


def test_ram_holds_only_a_bounded_cache_of_ids(tmp_path: Path) -> None:
    journal = InboundJournal(tmp_path / "inbound.jsonl")
    keys = journal._seen  # the set itself: what it keeps in RAM is the point of the test
    for i in range(3 * keys._cache_max):
        assert journal.accept(inbound(i))
        journal.complete(inbound(i).key, "answered")
    assert len(keys._recent) <= keys._cache_max
    assert journal.seen_count == 3 * keys._cache_max
    assert journal.is_seen(inbound(0).key)  # long out of the cache: read from disk
    assert not journal.accept(inbound(0))
    journal.close()


def test_ids_survive_a_restart_and_compaction_drops_finished_records(tmp_path: Path) -> None:
    path = tmp_path / "inbound.jsonl"
    journal = InboundJournal(path)
    for i in range(5):
        journal.accept(inbound(i))
    for i in range(4):
        journal.complete(inbound(i).key, "answered")
    journal.mark_seen(["telegram:c1:primed"])
    journal.compact()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["op"], r["msg"]["message_id"]) for r in records] == [("in", "m4")]
    journal.close()
    reopened = InboundJournal(path)
    assert all(reopened.is_seen(inbound(i).key) for i in range(5))
    assert reopened.is_seen("telegram:c1:primed")
    assert [m.message_id for m in reopened.pending()] == ["m4"]
    reopened.close()


def test_an_old_journal_with_seen_records_is_migrated_on_first_start(tmp_path: Path) -> None:
    """A runtime/ written before the seen ids moved to disk: compaction had carried every id
    over as a `seen` record; `in` and `done` records followed."""
    path = tmp_path / "bus" / "inbound.jsonl"
    path.parent.mkdir()
    old = [{"op": "seen", "key": f"telegram:c1:old{i}", "at": 900.0 + i} for i in range(3)]
    old.append({"op": "in", "at": 1001.0, "msg": inbound(1).to_dict()})
    old.append({"op": "in", "at": 1002.0, "msg": inbound(2).to_dict()})
    old.append({"op": "done", "key": inbound(1).key, "status": "answered", "at": 1003.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert not seen_path(path).exists()

    journal = InboundJournal(path, clock=lambda: 1010.0)
    assert all(journal.is_seen(f"telegram:c1:old{i}") for i in range(3))
    assert journal.is_seen(inbound(1).key) and journal.is_seen(inbound(2).key)
    assert [m.message_id for m in journal.pending()] == ["m2"]
    assert {r["op"] for r in map(json.loads, path.read_text().splitlines())} == {"in"}
    journal.close()
    # the ids are in the database now, under the time they were first seen
    keys = ExpiringKeys(seen_path(path), window_s=100, clock=lambda: 1010.0)
    assert "telegram:c1:old0" in keys and len(keys) == 5
    # the old ids (at 900-902) are more than a window older than the last commit (1010)
    assert keys.expire() == 3 and inbound(1).key in keys
    keys.close()


def test_expiry_holds_the_previous_runs_last_window_for_one_window_after_a_start(
        tmp_path: Path) -> None:
    """A message taken in just before a long stop can come back when the channel reads again
    (its cursor may not have been stored): after the start it is kept one more window."""
    now = [1000.0]
    path = tmp_path / "keys.sqlite3"
    keys = ExpiringKeys(path, window_s=100, clock=lambda: now[0])
    keys.add("early", 905.0)
    keys.add("late", 990.0)
    keys.commit()  # alive at 1000
    assert keys.expire() == 0
    now[0] = 1050.0
    assert keys.expire() == 1 and "early" not in keys and "late" in keys
    keys.close()  # alive at 1050

    now[0] = 100_000.0  # down for a day
    keys = ExpiringKeys(path, window_s=100, clock=lambda: now[0])
    assert keys.expire() == 0 and "late" in keys
    now[0] += 99.0  # within one window of the start: the old run's last ids stay
    keys.add("new", now[0])
    assert keys.expire() == 0 and "late" in keys
    now[0] += 2.0  # a full window of running time later they go; the new one stays
    assert keys.expire() == 1 and "late" not in keys and "new" in keys
    keys.close()


def test_one_expiry_drains_a_backlog_of_many_batches_up_to_its_cap(tmp_path: Path) -> None:
    """The previous run's ids all fall due when their hold ends: one expiry (once a minute)
    must take many batches, not one, or a busy daemon's database only grows."""
    now = [1000.0]
    journal = InboundJournal(tmp_path / "inbound.jsonl", seen_ttl_s=100, clock=lambda: now[0])
    backlog = 2 * EXPIRE_BATCH + 10
    journal.mark_seen([f"telegram:c1:old{i}" for i in range(backlog)])
    journal.compact()
    now[0] = 5000.0
    assert journal.expire_seen(batches=2) == 2 * EXPIRE_BATCH  # the cap per call holds
    assert journal.expire_seen() == 10 and journal.seen_count == 0
    journal.close()


def test_an_unreadable_database_is_moved_aside_and_rebuilt_from_the_journal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "inbound.jsonl"
    journal = InboundJournal(path)
    journal.accept(inbound(1))
    journal.close()
    seen_path(path).write_bytes(b"this is not a database" * 100)
    reopened = InboundJournal(path)
    assert reopened.is_seen(inbound(1).key)  # pending in the journal, so back in the set
    assert list(tmp_path.glob("inbound-seen.sqlite3.corrupt-*"))
    assert "moved it aside" in caplog.text
    reopened.close()


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from soulflow.backends.file.inbound import InboundJournal
    from soulflow.contracts import InboundMessage

    path, start = Path(sys.argv[1]), int(sys.argv[2])
    journal = InboundJournal(path, fsync="never")
    i = start
    while True:
        message = InboundMessage(provider="telegram", chat_id="c1", message_id=f"m{i}",
                                 sender_id="u", text="x", received_at=1000.0 + i)
        print(f"TRYING {i}", flush=True)  # from here on, the id may be journaled
        if not journal.accept(message):
            print(f"REJECTED {i}", flush=True)
            continue
        if i % 3:  # two in three are finished; the rest stay pending
            journal.complete(message.key, "answered")
        print(f"ACCEPTED {i}", flush=True)
        if i % 97 == 0:
            journal.sync()
        if journal.needs_compaction or i % 500 == 0:
            journal.compact()
        i += 1
""")


@pytest.mark.parametrize("kill_after", [1, 250, 777, 1500, 2600])
def test_kill_9_at_any_instant_loses_nothing_and_forgets_nothing(
        tmp_path: Path, kill_after: int) -> None:
    """A process takes messages in (compacting, syncing, committing as the daemon does) and is
    SIGKILLed after `kill_after` of them, mid-whatever; the next start must know every id it
    acknowledged and still hold every one it did not finish. Run twice, so the second life is
    killed too and the third checks both. An id being taken in when the kill lands may or may
    not be known afterwards (journaled or not, never acknowledged): the next life starts past
    every id the last one tried, so any id it finds already known is a phantom."""
    path = tmp_path / "inbound.jsonl"
    acknowledged: list[int] = []
    start = 0
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(start)],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout is not None
        lines, accepted = [], 0
        for line in proc.stdout:
            lines.append(line)
            accepted += line.startswith("ACCEPTED")
            if accepted >= kill_after:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        lines.extend(proc.stdout)  # what it printed before it died
        proc.stdout.close()
        tried = start
        for line in lines:
            word, number = line.split()
            assert word != "REJECTED", f"{line.strip()}: an id it never took was known"
            if word == "TRYING":
                tried = int(number)
            else:
                acknowledged.append(int(number))
        start = tried + 1
    journal = InboundJournal(path)
    pending = {m.message_id for m in journal.pending()}
    for i in acknowledged:
        assert journal.is_seen(f"telegram:c1:m{i}"), f"m{i} was forgotten"
        if i % 3 == 0:
            assert f"m{i}" in pending, f"m{i} was lost before it was finished"
    journal.close()
