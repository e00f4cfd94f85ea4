"""The trust-zones migration of a workspace from today's layout: nothing lost, once, and a
crash (an exception or a SIGKILL) at any step followed by a restart finishes it.

The workspace below is what a daemon before trust zones leaves: consolidation summaries of
every chat in the daily notes, every chat's facts under `## Learned from conversations` in
memory/MEMORY.md, attachments flat in runtime/inbound-files/<provider>/ and in per-chat
`c<sha12>/` folders, sessions with consolidation markers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.consolidate import CONSOLIDATED_TYPE, consolidation_due, session_progress
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.runtime.zone_migration import (
    STATE_FILE,
    MigrationError,
    ZoneMigration,
    chat_dir_name,
    migrate_workspace,
)
from soulflow.storage.beneath import Beneath

NOW = 1_773_489_600.0  # 2026-03-14T12:00:00Z
BACKUP = "runtime/migrations/20260314T120000Z-zones"
ROOT = Path(__file__).resolve().parents[2]

MEMORY_MD = """# Long-term memory

Operator fact OP-1.

## Learned from conversations

- Alice's favourite colour is teal ALICE-FACT
- Bob's dog is called Rex BOB-FACT

## House rules

OP-2: answer in English.
"""
NOTE_13 = ("# 2026-03-13\n\n"
           "**Conversation summary** (telegram:111, messages 0–40): ALICE-SUMMARY\n\n"
           "**Conversation summary** (telegram:222, messages 0–30): BOB-SUMMARY\n\n")
NOTE_14 = ("# 2026-03-14\n\n**Conversation summary** (telegram:-100, messages 0–20): GROUP-S\n\n"
           "OP-3: the operator's own line.\n\n"
           "**Conversation summary** (telegram:111, messages 41–60): ALICE-SUMMARY-2\n\n")
NOTE_10 = "# 2026-03-10\n\nOP-4: only the operator wrote here.\n\n"
GROUP_DIR = chat_dir_name("-100")


def build_old_workspace(root: Path) -> dict[str, bytes]:
    """The workspace; returns every file the migration may move, by relative path."""
    files = {
        "memory/MEMORY.md": MEMORY_MD.encode(),
        "memory/2026-03-13.md": NOTE_13.encode(),
        "memory/2026-03-14.md": NOTE_14.encode(),
        "memory/2026-03-10.md": NOTE_10.encode(),
        "memory/notes.md": b"operator notes OP-5\n",
        "runtime/inbound-files/telegram/AAA_alice.pdf": b"%PDF alice's file",
        "runtime/inbound-files/telegram/ZZZ_orphan.txt": b"nobody mentions me",
        f"runtime/inbound-files/telegram/{GROUP_DIR}/BBB_group.png": b"PNG group file",
        f"runtime/inbound-files/telegram/{chat_dir_name('999')}/x.txt": b"unknown chat",
        "runtime/inbound-files/discord/SSS_shared.txt": b"two chats mention me",
        "runtime/inbound-files/slack/TTT_thread.txt": b"slack thread file",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    sessions = FileSessionStore(root / "runtime" / "sessions")
    saved = root / "runtime" / "inbound-files"
    chat(sessions, "telegram:111", 61, f"[attachment alice.pdf saved at "
         f"{saved}/telegram/AAA_alice.pdf]")
    sessions.append("telegram:111", {"_type": CONSOLIDATED_TYPE, "through": 40, "count": 61})
    chat(sessions, "telegram:222", 10, "")  # never consolidated
    chat(sessions, "telegram:-100", 25, "")
    sessions.append("telegram:-100", {"_type": CONSOLIDATED_TYPE, "through": 4, "count": 25})
    chat(sessions, "discord:1", 2, f"see {saved}/discord/SSS_shared.txt")
    chat(sessions, "discord:2", 2, f"and {saved}/discord/SSS_shared.txt")
    chat(sessions, "slack:C1:1712.0001", 2,
         f"[attachment t.txt saved at {saved}/slack/TTT_thread.txt]")
    chat(sessions, "heartbeat", 6, "")
    sessions.append("heartbeat", {"_type": CONSOLIDATED_TYPE, "through": 1, "count": 6})
    sessions.close()
    return files


def chat(sessions: FileSessionStore, key: str, count: int, first: str) -> None:
    for i in range(count):
        text = first if i == 0 and first else f"{key} message {i}"
        sessions.append(key, {"role": "user" if i % 2 == 0 else "assistant", "content": text})


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (sessions without their timestamps), for comparisons."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        if rel.startswith("runtime/sessions/"):
            records = [json.loads(line) for line in data.splitlines() if line.strip()]
            data = json.dumps([{k: v for k, v in r.items() if k not in ("at", "created_at")}
                               for r in records]).replace(str(root), "<ws>").encode()
        elif rel == STATE_FILE.as_posix():  # what a resumed run counts is its own part
            data = json.dumps({k: v for k, v in json.loads(data).items()
                               if k != "report"}).encode()
        found[rel] = data
    return found


def migrate(root: Path, **options: Any) -> Any:
    sessions = FileSessionStore(root / "runtime" / "sessions")
    try:
        return ZoneMigration(Beneath(root), sessions, clock=lambda: NOW, **options).run()
    finally:
        sessions.close()


@pytest.fixture
def old(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "ws"
    return root, build_old_workspace(root)


def test_today_s_layout_migrates_with_nothing_lost(old: tuple[Path, dict[str, bytes]]) -> None:
    root, before = old
    report = migrate(root)
    assert (report.notes_moved, report.notes_kept, report.facts_moved) == (2, 1, True)
    assert (report.files_to_chats, report.files_to_backup, report.sessions_reset) == (3, 3, 3)
    after = tree(root)
    # global memory: the operator's, without any chat's summaries or facts
    memory = after["memory/MEMORY.md"].decode()
    assert "OP-1" in memory and "OP-2" in memory and "## House rules" in memory
    assert "Learned from conversations" not in memory and "FACT" not in memory
    assert "memory/2026-03-13.md" not in after
    assert after["memory/2026-03-14.md"] == b"# 2026-03-14\n\nOP-3: the operator's own line.\n\n"
    assert after["memory/2026-03-10.md"] == NOTE_10.encode()
    assert after["memory/notes.md"] == b"operator notes OP-5\n"
    # the backup: what was moved, at its old relative path, byte for byte
    for rel in ("memory/MEMORY.md", "memory/2026-03-13.md", "memory/2026-03-14.md"):
        assert after[f"{BACKUP}/{rel}"] == before[rel]
    # attachments: into their chat's folder, or to the backup
    assert after["chats/telegram-111/files/AAA_alice.pdf"] == b"%PDF alice's file"
    assert after["chats/telegram--100/files/BBB_group.png"] == b"PNG group file"
    assert after["chats/slack-C1/files/TTT_thread.txt"] == b"slack thread file"
    for rel in ("telegram/ZZZ_orphan.txt", f"telegram/{chat_dir_name('999')}/x.txt",
                "discord/SSS_shared.txt"):  # no chat, an unknown chat, two chats
        assert after[f"{BACKUP}/runtime/inbound-files/{rel}"] == \
            before[f"runtime/inbound-files/{rel}"]
    assert not [rel for rel in after if rel.startswith("runtime/inbound-files/")]
    # nothing lost: every moved file's bytes are somewhere in the workspace
    contents = set(after.values())
    assert all(data in contents for data in before.values())
    assert f"{BACKUP}/RESTORE.md" in after
    state = json.loads(after[STATE_FILE.as_posix()])
    assert state["status"] == "done" and state["backup"] == BACKUP


def test_consolidated_sessions_are_consolidated_again(old: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = old
    migrate(root)
    sessions = FileSessionStore(root / "runtime" / "sessions")
    for key in ("telegram:111", "telegram:-100", "heartbeat"):
        last = sessions.last(key, 1)[0]
        assert (last["_type"], last["through"]) == (CONSOLIDATED_TYPE, -1)
        progress = session_progress(sessions, key)
        assert progress.through == -1 and progress.messages[0][0] == 0
        # due at once (the threshold is not waited for again)
        assert consolidation_due(sessions, key, 60, keep_last=2)
    assert not [r for r in sessions.last("telegram:222", 20) if "_type" in r]
    assert not consolidation_due(sessions, "telegram:222", 60, keep_last=2)


def test_the_migration_runs_once(old: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = old
    migrate(root)
    done = tree(root)
    (root / "memory" / "2026-03-15.md").write_text(
        "# 2026-03-15\n\n**Conversation summary** (operator, pasted): kept\n\n")
    again = migrate(root)
    assert again.already_done and again.backup == BACKUP
    assert tree(root) == {**done, "memory/2026-03-15.md": (
        b"# 2026-03-15\n\n**Conversation summary** (operator, pasted): kept\n\n")}


def test_a_fresh_workspace_only_records_the_migration(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    report = migrate(root)
    assert not report.already_done and report.notes_moved == report.files_to_chats == 0
    assert list(tree(root)) == [STATE_FILE.as_posix()]


def test_the_restore_commands_bring_back_the_old_memory(
        old: tuple[Path, dict[str, bytes]]) -> None:
    root, before = old
    migrate(root)
    restore = (root / BACKUP / "RESTORE.md").read_text()
    commands = [line.strip() for line in restore.splitlines() if line.startswith("    cp ")]
    assert commands == [f"cp -a {BACKUP}/memory/. memory/", f"cp -a {BACKUP}/runtime/. runtime/"]
    for command in commands:
        subprocess.run(command, shell=True, cwd=root, check=True)  # noqa: S602 (the doc's text)
    after = tree(root)
    for rel, data in before.items():
        if rel.startswith("memory/") or "ZZZ" in rel or "SSS" in rel or "/x.txt" in rel:
            assert after[rel] == data, rel


class Crash(Exception):
    pass


def crash_after(steps: int) -> Any:
    count = [0]

    def on_step(_what: str) -> None:
        count[0] += 1
        if count[0] > steps:
            raise Crash(f"stopped after {steps} steps")
    return on_step


def test_a_crash_at_any_step_then_a_restart_finishes_it(tmp_path: Path) -> None:
    clean_root = tmp_path / "clean"
    before = build_old_workspace(clean_root)
    steps: list[str] = []
    migrate(clean_root, on_step=steps.append)
    clean = tree(clean_root)
    assert len(steps) >= 15  # each move, write and marker is a step
    for k in range(len(steps)):
        root = tmp_path / f"crash{k}"
        build_old_workspace(root)
        with pytest.raises(Crash):
            migrate(root, on_step=crash_after(k))
        assert json.loads((root / STATE_FILE).read_text())["status"] == "started"
        report = migrate(root)  # the restart
        assert not report.already_done
        finished = tree(root)
        assert finished == clean, f"crash after step {k} ({steps[k]})"
        assert all(data in set(finished.values()) for data in before.values())


@pytest.mark.parametrize("at", [1, 6, 12])
def test_a_sigkill_mid_migration_then_a_restart_finishes_it(tmp_path: Path, at: int) -> None:
    clean_root = tmp_path / "clean"
    build_old_workspace(clean_root)
    migrate(clean_root)
    root = tmp_path / "ws"
    before = build_old_workspace(root)
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from soulflow.runtime.zone_migration import ZoneMigration
        from soulflow.backends.file.sessions import FileSessionStore
        from soulflow.storage.beneath import Beneath
        root = Path({str(root)!r})
        count = [0]
        def on_step(what):
            count[0] += 1
            if count[0] == {at}:
                os.kill(os.getpid(), signal.SIGKILL)
        ZoneMigration(Beneath(root), FileSessionStore(root / "runtime" / "sessions"),
                      clock=lambda: {NOW!r}, on_step=on_step).run()
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert killed.returncode == -signal.SIGKILL
    migrate(root)
    assert tree(root) == tree(clean_root)
    assert all(data in set(tree(root).values()) for data in before.values())


def test_links_are_moved_as_links_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    build_old_workspace(root)
    outside = tmp_path / "outside.md"
    outside.write_text("HOST")
    (root / "memory" / "2026-03-12.md").symlink_to(outside)
    (root / "runtime" / "inbound-files" / "telegram" / "LLL_link").symlink_to(outside)
    migrate(root)
    assert (root / BACKUP / "memory" / "2026-03-12.md").is_symlink()
    assert (root / BACKUP / "runtime/inbound-files/telegram/LLL_link").is_symlink()
    assert outside.read_text() == "HOST"


def test_a_broken_state_file_stops_the_start_with_a_sentence(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "runtime" / "migrations").mkdir(parents=True)
    (root / STATE_FILE).write_text("{oops")
    with pytest.raises(MigrationError, match="zones.json is not valid JSON"):
        migrate_workspace(Beneath(root), FileSessionStore(root / "runtime" / "sessions"))
