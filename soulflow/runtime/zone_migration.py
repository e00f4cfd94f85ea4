"""The trust-zones migration: a workspace from before chat zones, moved once, at start.

Before trust zones, consolidation wrote every chat's summaries into the one daily note
`memory/YYYY-MM-DD.md` and every chat's facts under `## Learned from conversations` in
`memory/MEMORY.md`, and channels saved attachments under `runtime/inbound-files/<provider>/`
(flat `<id>_<name>` files, or per-chat `c<sha12>/` folders, see
`chat_dir_name` below). Left in place, the notes and facts would go on
reaching every chat's prompt as global memory. So, once, before any service starts:

1. **Daily notes** holding consolidation summaries (paragraphs starting with
   `**Conversation summary** (`) move whole to the backup; the operator's own paragraphs of
   such a note, if any, are written back to `memory/YYYY-MM-DD.md`.
2. **MEMORY.md**'s `## Learned from conversations` section: the whole file is copied to the
   backup, then `memory/MEMORY.md` is rewritten without that section.
3. **Attachments** move into their chat's `chats/<zone>/files/` when the owning chat is
   found: a `c<sha12>/` folder by matching the hash against the chat ids of the sessions; a
   flat file by the session transcripts that mention its saved path (exactly one chat must).
   The rest moves to the backup.
4. **Consolidation markers**: every session consolidated before gets a reset marker
   (`soulflow.agent.consolidate.reset_marker`), so its history is consolidated again, into
   its own zone, at its next answered message: how Alice keeps recalling her facts in her DM.

The backup is `runtime/migrations/<UTC stamp>-zones/`, with the workspace-relative paths
kept (restorable by copying back; the folder's `RESTORE.md` has the exact commands). The
state file `runtime/migrations/zones.json` names the backup before the first move and says
`done` after the last, so the migration runs once; every step is idempotent and each move is
one `rename(2)`, so a crash at any point followed by a restart finishes the same migration
into the same backup with nothing lost. Sessions are read and marked through the daemon's
`SessionStore` (files or Redis), never as files. Every file operation goes through
`Beneath`: a link met on the way is moved as a link, never followed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from soulflow.agent.consolidate import reset_marker, session_progress
from soulflow.agent.memory import LONG_TERM_FILE, facts_section_bounds
from soulflow.backends.base import SessionStore
from soulflow.config import ConfigError
from soulflow.security.protected import RUNTIME_DIR
from soulflow.security.zones import OPERATOR_MEMORY_DIR, ChatZone, zone_named
from soulflow.storage.beneath import Beneath, DirEntry, RefusedPath

__all__ = ["MIGRATIONS_DIR", "STATE_FILE", "MigrationError", "MigrationReport",
           "ZoneMigration", "chat_dir_name", "migrate_workspace"]

log = logging.getLogger(__name__)

MIGRATIONS_DIR = PurePosixPath(RUNTIME_DIR, "migrations")
STATE_FILE = MIGRATIONS_DIR / "zones.json"
INBOUND_DIR = PurePosixPath(RUNTIME_DIR, "inbound-files")  # where attachments used to be saved
SUMMARY_PREFIX = "**Conversation summary** ("
RESTORE_FILE = "RESTORE.md"
_VERSION = 1
_DAILY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_CHAT_DIR = re.compile(r"^c[0-9a-f]{12}$")
# how a transcript names a saved attachment: "[attachment a.pdf saved at /ws/runtime/...]"
_MENTION = re.compile(r"inbound-files/([A-Za-z0-9_.-]+)/((?:c[0-9a-f]{12}/)?[A-Za-z0-9._-]+)")

Step = Callable[[str], None]
"""Called after each change the migration makes (a move, a write, a marker), with a short
description: progress for logs, and where the crash tests stop it."""


def chat_dir_name(chat_id: str) -> str:
    """The per-chat folder name the old layout used under ``runtime/inbound-files/<provider>/``
    (a digest of the chat id): how the migration finds whose files those were."""
    return "c" + hashlib.sha256(str(chat_id).encode("utf-8")).hexdigest()[:12]


class MigrationError(ConfigError):
    """The workspace could not be migrated; the daemon does not start on a half-migrated
    workspace (a restart continues where this stopped)."""


@dataclass(slots=True)
class MigrationReport:
    """What a run did (all zero when the workspace was migrated before)."""

    already_done: bool = False
    backup: str | None = None
    notes_moved: int = 0
    notes_kept: int = 0  # operator paragraphs written back to memory/
    facts_moved: bool = False
    files_to_chats: int = 0
    files_to_backup: int = 0
    sessions_reset: int = 0
    chats: list[str] = field(default_factory=list)


class ZoneMigration:
    """One workspace's migration (see the module docstring); `run()` is safe to repeat."""

    def __init__(self, files: Beneath, sessions: SessionStore, *,
                 clock: Callable[[], float] = time.time, on_step: Step | None = None) -> None:
        self.files = files
        self.sessions = sessions
        self._clock = clock
        self._on_step = on_step
        self.report = MigrationReport()
        self._backup = PurePosixPath()

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> MigrationReport:
        state = self._state()
        if state.get("status") == "done":
            return MigrationReport(already_done=True, backup=state.get("backup"))
        backup, started_at = state.get("backup"), state.get("started_at")
        if not isinstance(backup, str) or not backup.startswith(f"{MIGRATIONS_DIR}/"):
            started_at = self._clock()
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started_at))
            backup = f"{MIGRATIONS_DIR}/{stamp}-zones"
            self._write_state({"status": "started", "backup": backup,
                               "started_at": started_at})
            self._step("recorded the start")
        self._backup = PurePosixPath(backup)
        self.report.backup = backup
        try:
            self._daily_notes()
            self._learned_facts()
            self._attachments()
            self._reset_sessions()
            if self.files.is_dir(self._backup):
                self.files.write_atomic(self._backup / RESTORE_FILE,
                                        restore_text(backup).encode("utf-8"))
        except OSError as exc:
            raise MigrationError(
                f"migrating the workspace to trust zones stopped: {exc}; fix that and start "
                f"again (the migration continues; nothing moved is lost, see {backup})"
            ) from exc
        report = asdict(self.report)
        report.pop("already_done")
        self._write_state({"status": "done", "backup": backup, "started_at": started_at,
                           "finished_at": self._clock(), "report": report})
        return self.report

    # -- 1. daily notes --------------------------------------------------------------------

    def _daily_notes(self) -> None:
        for entry in self._list(PurePosixPath(OPERATOR_MEMORY_DIR)):
            rel = PurePosixPath(OPERATOR_MEMORY_DIR, entry.name)
            if not _DAILY.match(entry.name) or entry.kind not in ("file", "link"):
                continue
            if entry.kind == "link":  # never read through; kept in the backup as it is
                self._to_backup(rel)
                self.report.notes_moved += 1
                continue
            text = self.files.read_bytes(rel).decode("utf-8", errors="replace")
            if SUMMARY_PREFIX not in text:
                continue  # the operator's own note
            kept = operator_paragraphs(text)
            self._to_backup(rel)
            self.report.notes_moved += 1
            if kept:
                self.files.write_atomic(rel, kept.encode("utf-8"))
                self.report.notes_kept += 1
                self._step(f"kept the operator's paragraphs of {rel}")
        # a crash between the move and the write back above: the note is in the backup and
        # not in memory/ any more; write its operator paragraphs back now
        for entry in self._list(self._backup / OPERATOR_MEMORY_DIR):
            rel = PurePosixPath(OPERATOR_MEMORY_DIR, entry.name)
            if entry.kind != "file" or not _DAILY.match(entry.name) or self._exists(rel):
                continue
            saved = self.files.read_bytes(self._backup / rel).decode("utf-8", errors="replace")
            kept = operator_paragraphs(saved)
            if kept:
                self.files.write_atomic(rel, kept.encode("utf-8"))
                self.report.notes_kept += 1
                self._step(f"kept the operator's paragraphs of {rel}")

    # -- 2. MEMORY.md's learned facts ------------------------------------------------------

    def _learned_facts(self) -> None:
        rel = PurePosixPath(OPERATOR_MEMORY_DIR, LONG_TERM_FILE)
        if not self.files.is_file(rel):
            return  # missing, or a link (never read through; the prompt refuses it too)
        data = self.files.read_bytes(rel)
        stripped = without_learned_facts(data.decode("utf-8", errors="replace"))
        if stripped is None:
            return
        self._copy_to_backup(rel, data)
        self.files.write_atomic(rel, stripped.encode("utf-8"))
        self.report.facts_moved = True
        self._step(f"removed the learned facts from {rel}")

    # -- 3. attachments --------------------------------------------------------------------

    def _attachments(self) -> None:
        entries = self._list(INBOUND_DIR)
        providers = [e for e in entries if e.kind == "dir"]
        for stray in (e for e in entries if e.kind != "dir"):
            self._file_to_backup(INBOUND_DIR / stray.name)
        if not providers:
            return
        owners = _ChatIndex(self.sessions)
        for provider in providers:
            base = INBOUND_DIR / provider.name
            for entry in self._list(base):
                rel = base / entry.name
                if entry.kind == "dir" and _CHAT_DIR.match(entry.name):
                    zone = owners.zone_of_chat_dir(provider.name, entry.name)
                    self._move_tree(rel, zone)
                elif entry.kind == "file":
                    zone = owners.zone_of_mention(f"{provider.name}/{entry.name}")
                    self._move_file(rel, entry.name, zone)
                elif entry.kind == "dir":
                    self._move_tree(rel, None)
                else:
                    self._file_to_backup(rel)

    def _move_tree(self, top: PurePosixPath, zone: ChatZone | None) -> None:
        for where, _dirs, names in list(self.files.walk(top)):
            inner = PurePosixPath(where).relative_to(top)
            for name in names:
                rel = PurePosixPath(where, name)
                if zone is not None and self.files.is_file(rel):
                    self._move_file(rel, (inner / name).as_posix(), zone)
                else:
                    self._file_to_backup(rel)

    def _move_file(self, rel: PurePosixPath, name: str, zone: ChatZone | None) -> None:
        if zone is None:
            self._file_to_backup(rel)
            return
        target = self._free(zone.files_rel / name)
        self.files.rename(rel, target)
        self.report.files_to_chats += 1
        if zone.name not in self.report.chats:
            self.report.chats.append(zone.name)
        self._step(f"moved {rel} to {target}")

    def _file_to_backup(self, rel: PurePosixPath) -> None:
        self._to_backup(rel)
        self.report.files_to_backup += 1

    # -- 4. consolidation markers ----------------------------------------------------------

    def _reset_sessions(self) -> None:
        for info in self.sessions.list_sessions():
            progress = session_progress(self.sessions, info.key)
            if progress.through < 0:
                continue  # never consolidated, or reset already (a run this crash cut off)
            self.sessions.append(info.key, reset_marker(progress.total))
            self.report.sessions_reset += 1
            self._step(f"reset the consolidation of {info.key}")

    # -- helpers ---------------------------------------------------------------------------

    def _to_backup(self, rel: PurePosixPath) -> None:
        target = self._free(self._backup / rel)
        self.files.rename(rel, target)
        self._step(f"moved {rel} to {target}")

    def _copy_to_backup(self, rel: PurePosixPath, data: bytes) -> None:
        """`data` (the file at `rel`) saved in the backup unless the same bytes are there."""
        target = self._backup / rel
        for candidate in _numbered(target):
            if not self._exists(candidate):
                self.files.write_atomic(candidate, data)
                self._step(f"copied {rel} to {candidate}")
                return
            if self.files.is_file(candidate) and self.files.read_bytes(candidate) == data:
                return

    def _free(self, rel: PurePosixPath) -> PurePosixPath:
        """`rel`, or `name.1.ext`, `name.2.ext`... the first that does not exist."""
        return next(candidate for candidate in _numbered(rel) if not self._exists(candidate))

    def _exists(self, rel: PurePosixPath) -> bool:
        return self.files.stat(rel) is not None

    def _list(self, rel: PurePosixPath) -> list[DirEntry]:
        """The folder's entries; none when it is missing, or is a link (never followed:
        what lies behind it is not read by the daemon either, so it leaks nothing)."""
        try:
            return self.files.list_dir(rel)
        except FileNotFoundError:
            return []
        except RefusedPath as exc:
            log.warning("trust zones migration: not entering %s: %s", rel, exc)
            return []

    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.files.read_bytes(STATE_FILE) or b"{}")
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise MigrationError(f"{STATE_FILE} is not valid JSON ({exc}); it records the "
                                 "trust-zones migration: fix or remove it") from exc
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: dict[str, Any]) -> None:
        self.files.write_atomic(STATE_FILE, json.dumps(
            {"version": _VERSION, **state}, indent=1, ensure_ascii=False).encode("utf-8"))

    def _step(self, what: str) -> None:
        log.debug("zone migration: %s", what)
        if self._on_step is not None:
            self._on_step(what)


class _ChatIndex:
    """Which chat owns an attachment, from the sessions: their keys (chat ids, for the
    `c<sha12>` folders) and, read on first need, their transcripts (flat files)."""

    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions
        self._keys = [info.key for info in sessions.list_sessions()]
        self._mentions: dict[str, set[str]] | None = None

    def zone_of_chat_dir(self, provider: str, name: str) -> ChatZone | None:
        chats = {chat for key in self._keys
                 if (chat := chat_of_session(key)) is not None and chat[0] == provider
                 and chat_dir_name(chat[1]) == name}
        return zone_named(*chats.pop()) if len(chats) == 1 else None

    def zone_of_mention(self, saved: str) -> ChatZone | None:
        """The zone of the one chat whose transcripts name `<provider>/<file>`; None when
        no chat does, or more than one (the file then goes to the backup)."""
        if self._mentions is None:
            self._mentions = self._read_mentions()
        owners = self._mentions.get(saved, set())
        if len(owners) != 1:
            return None
        provider, _, chat_id = next(iter(owners)).partition(":")
        return zone_named(provider, chat_id)

    def _read_mentions(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for key in self._keys:
            chat = chat_of_session(key)
            if chat is None:
                continue
            for record in self._sessions.range(key, 0):
                content = record.get("content")
                if not isinstance(content, str) or "inbound-files/" not in content:
                    continue
                for provider, name in _MENTION.findall(content):
                    found.setdefault(f"{provider}/{name}", set()).add(f"{chat[0]}:{chat[1]}")
        return found


def chat_of_session(key: str) -> tuple[str, str] | None:
    """(provider, chat id) of a chat's session key (`provider:chat[:thread]`); None for the
    sessions of quiet turns (`heartbeat`, `cron:<job>`), which no attachment belongs to."""
    provider, sep, rest = key.partition(":")
    chat_id = rest.split(":", 1)[0]
    if not sep or not chat_id or provider == "cron":
        return None
    return provider, chat_id


def operator_paragraphs(note: str) -> str:
    """A daily note without its consolidation summaries: "" when only its heading is left."""
    paragraphs = [p for p in note.split("\n\n") if p.strip()]
    kept = [p for p in paragraphs if not p.lstrip().startswith(SUMMARY_PREFIX)]
    if not [p for p in kept if not p.lstrip().startswith("# ")]:
        return ""
    return "\n\n".join(p.strip("\n") for p in kept) + "\n\n"


def without_learned_facts(text: str) -> str | None:
    """MEMORY.md without its `## Learned from conversations` section; None if it has none."""
    lines = text.splitlines()
    bounds = facts_section_bounds(lines)
    if bounds is None:
        return None
    start, end = bounds
    kept = lines[:start] + lines[end:]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept) + "\n" if kept else ""


def _numbered(rel: PurePosixPath) -> Iterable[PurePosixPath]:
    yield rel
    stem, dot, ext = rel.name.partition(".")
    for n in range(1, 1_000_000):
        yield rel.with_name(f"{stem}.{n}{dot}{ext}")


def restore_text(backup: str) -> str:
    """The backup folder's RESTORE.md: what is in it and the exact commands to undo."""
    return f"""# Trust-zones migration backup

This folder holds what the daemon moved out of the workspace when it first started with
trust zones. Paths below it are the workspace-relative paths the files had.

- `memory/YYYY-MM-DD.md`: daily notes that held conversation summaries of every chat (the
  operator's own paragraphs of such a note were written back to `memory/`).
- `memory/MEMORY.md`: MEMORY.md as it was, with its `## Learned from conversations` section
  (every chat's facts); the workspace's copy no longer has that section.
- `runtime/inbound-files/...`: attachments whose chat could not be found. Attachments whose
  chat was found are in `chats/<zone>/files/`.

Chats are consolidated again into their own memory (`chats/<zone>/memory/`) at their next
message, so nothing needs restoring for the bot to remember.

To restore the old global memory (with the daemon stopped, from the workspace):

    cp -a {backup}/memory/. memory/

To put unclaimed attachments back where they were:

    cp -a {backup}/runtime/. runtime/

To make the daemon run the migration again, remove its record
`{STATE_FILE}` (a new backup folder is made).
"""


def migrate_workspace(files: Beneath, sessions: SessionStore, *,
                      on_step: Step | None = None) -> MigrationReport:
    """Run the migration once (a no-op after it is done) and log what it did."""
    report = ZoneMigration(files, sessions, on_step=on_step).run()
    if not report.already_done:
        log.info("trust zones: migrated the workspace (backup in %s): %d daily note(s) and "
                 "%s moved to the backup, %d attachment(s) into %d chat folder(s), %d to the "
                 "backup, %d session(s) to be consolidated again into their own chat",
                 report.backup, report.notes_moved,
                 "MEMORY.md's learned facts" if report.facts_moved else "no learned facts",
                 report.files_to_chats, len(report.chats), report.files_to_backup,
                 report.sessions_reset)
    return report
