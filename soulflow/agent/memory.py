"""Markdown memory the agent reads every turn: `MEMORY.md` and daily notes, per scope.

Plain files on purpose: the user can open, edit and version them with any editor.

A `MemoryStore` is one memory folder beneath the workspace: the operator's global memory
(`memory/`) or one chat's (`chats/<zone>/memory/`, see `soulflow.security.zones`); `for_zone`
gives a chat's store from the global one. Every read, tail read, append and rewrite goes
through `Beneath`, never a plain `open`: a chat's run can create files in its own folder
(and before trust zones could write almost anywhere), so a `MEMORY.md` or today's note that
is a link — to the vault key, to `runtime/`, to a host file — is refused and logged, never
followed, and an append never writes through one.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from soulflow.security.zones import OPERATOR_MEMORY_DIR, ChatZone
from soulflow.storage.beneath import Beneath

__all__ = ["FACTS_HEADING", "LONG_TERM_FILE", "MemoryHit", "MemoryStore", "RefusalLog",
           "facts_section_bounds", "is_fact_line", "merge_facts", "trim_to_cap"]

log = logging.getLogger(__name__)

LONG_TERM_FILE = "MEMORY.md"
FACTS_HEADING = "## Learned from conversations"
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_TOP_HEADING = re.compile(r"^#{1,2}\s")
_DAILY_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")


@dataclass(slots=True)
class MemoryHit:
    file: str
    line_number: int
    line: str


class RefusalLog:
    """Logs a refused memory file once until it reads fine again: the prompt re-reads it
    every second, and one planted link must not fill the log."""

    _MAX = 1024  # distinct paths remembered; beyond that a refusal is logged again

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def refused(self, rel: PurePosixPath, exc: OSError) -> None:
        key = rel.as_posix()
        if key in self._warned:
            return
        if len(self._warned) >= self._MAX:
            self._warned.clear()
        self._warned.add(key)
        log.warning("not reading %s: %s", key, exc)

    def fine(self, rel: PurePosixPath) -> None:
        self._warned.discard(rel.as_posix())


class MemoryStore:
    """Long-term memory and one note per day in one folder, with a plain search.

    `beneath` is the workspace (opened without following links), `rel` the folder's
    workspace-relative path: `memory` for global memory, `ChatZone.memory_rel` for a chat's.
    """

    def __init__(self, beneath: Beneath, rel: str | PurePosixPath = OPERATOR_MEMORY_DIR, *,
                 today: Callable[[], dt.date] = dt.date.today,
                 refusals: RefusalLog | None = None) -> None:
        if not isinstance(beneath, Beneath):
            raise TypeError("MemoryStore needs a Beneath (the workspace), not a path")
        self.beneath = beneath
        self.rel = PurePosixPath(rel)
        self._today = today
        self._refusals = refusals or RefusalLog()

    def for_zone(self, zone: ChatZone) -> MemoryStore:
        """The memory of one chat zone, on the same workspace and calendar."""
        return MemoryStore(self.beneath, zone.memory_rel, today=self._today,
                           refusals=self._refusals)

    # -- where things are ----------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self.beneath.root / self.rel

    @property
    def long_term_rel(self) -> PurePosixPath:
        return self.rel / LONG_TERM_FILE

    @property
    def long_term_path(self) -> Path:
        return self.beneath.root / self.long_term_rel

    def today(self) -> dt.date:
        return self._today()

    def daily_rel(self, day: dt.date | None = None) -> PurePosixPath:
        return self.rel / f"{(day or self._today()).isoformat()}.md"

    def daily_path(self, day: dt.date | None = None) -> Path:
        return self.beneath.root / self.daily_rel(day)

    # -- reading -------------------------------------------------------------------------

    def _read(self, rel: PurePosixPath) -> str:
        """The file's text; "" when it is missing, or refused (a link, not a regular file:
        logged once) or unreadable, so one bad file never empties a prompt."""
        try:
            text = self.beneath.read_text(rel)
        except OSError as exc:
            self._refusals.refused(rel, exc)
            return ""
        self._refusals.fine(rel)
        return text

    def read_long_term(self) -> str:
        return self._read(self.long_term_rel)

    def read_daily(self, day: dt.date | None = None) -> str:
        return self._read(self.daily_rel(day))

    def read_daily_tail(self, max_bytes: int, day: dt.date | None = None) -> tuple[str, bool]:
        """The newest whole paragraphs of the day's note within `max_bytes`, and whether older
        ones were left out. Reads only the file's end: a busy day's note (one summary per
        consolidation) grows all day, and the prompt reads it every second."""
        rel = self.daily_rel(day)
        try:
            data, size = self.beneath.read_tail(rel, max_bytes)
        except OSError as exc:
            self._refusals.refused(rel, exc)
            return "", False
        self._refusals.fine(rel)
        if size <= max_bytes:
            return data.decode("utf-8", errors="replace"), False
        tail = data.decode("utf-8", errors="ignore")
        start = tail.find("\n\n")  # the first paragraph is likely cut: start after it
        return (tail[start + 2:] if start >= 0 else tail.partition("\n")[2]), True

    # -- writing (a link under the name is refused: RefusedPath, an OSError) -------------

    def write_long_term(self, text: str) -> None:
        """Replace MEMORY.md (temp file and rename in its folder: a link under the name is
        replaced, never written through)."""
        self.beneath.write_atomic(self.long_term_rel, text.encode("utf-8"))

    def replace_long_term(self, expected: str, text: str) -> bool:
        """Write `text` only if the file still holds `expected`; False (nothing written) if it
        changed meanwhile. Background writers (consolidation) read, then wait for a model,
        then write: a user's edit made during that wait must win, not be overwritten."""
        if self.read_long_term() != expected:
            return False
        self.write_long_term(text)
        return True

    def append_daily(self, text: str, day: dt.date | None = None) -> None:
        """Add a paragraph to the day's note (creates it with a heading). A link or a
        non-regular file under the note's name is refused, never appended to."""
        self.beneath.append_text(self.daily_rel(day), f"{text.rstrip()}\n\n",
                               header=f"# {(day or self._today()).isoformat()}\n\n")

    def append_long_term(self, text: str) -> None:
        current = self.read_long_term()
        separator = "" if not current or current.endswith("\n\n") else (
            "\n" if current.endswith("\n") else "\n\n")
        self.write_long_term(f"{current}{separator}{text.rstrip()}\n")

    # -- listing and search --------------------------------------------------------------

    def file_names(self) -> list[str]:
        """The folder's regular `*.md` files (links are not listed), sorted."""
        try:
            entries = self.beneath.list_dir(self.rel)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._refusals.refused(self.rel, exc)
            return []
        return [e.name for e in entries if e.kind == "file" and e.name.endswith(".md")]

    def daily_note_names(self) -> list[str]:
        """The `YYYY-MM-DD.md` notes of the folder, oldest first."""
        return [name for name in self.file_names() if _DAILY_NAME.match(name)]

    def search(self, query: str, *, limit: int = 50) -> list[MemoryHit]:
        """Lines containing every word of `query`, newest daily notes first after MEMORY.md."""
        words = [w.casefold() for w in query.split() if w]
        if not words:
            return []
        names = self.file_names()
        long_term = [n for n in names if n == LONG_TERM_FILE]
        daily = sorted((n for n in names if n != LONG_TERM_FILE), reverse=True)
        hits: list[MemoryHit] = []
        for name in long_term + daily:
            for number, line in enumerate(self._read(self.rel / name).splitlines(), start=1):
                folded = line.casefold()
                if all(w in folded for w in words):
                    hits.append(MemoryHit(name, number, line))
                    if len(hits) >= limit:
                        return hits
        return hits


# -- editing MEMORY.md as a list of facts (used by consolidation) ---------------------------


def _fact_key(line: str) -> str:
    """How two facts are compared: no bullet, case, spacing or final full stop."""
    return " ".join(_BULLET.sub("", line).casefold().split()).rstrip(".")


def is_fact_line(line: str) -> bool:
    return bool(_BULLET.match(line))


def facts_section_bounds(lines: list[str]) -> tuple[int, int] | None:
    """(heading index, end index) of the FACTS_HEADING section in `lines`: from its heading
    to the next `#`/`##` heading (or the end); None when the file has none."""
    heading = next((i for i, line in enumerate(lines) if line.strip() == FACTS_HEADING), None)
    if heading is None:
        return None
    end = next((i for i in range(heading + 1, len(lines)) if _TOP_HEADING.match(lines[i])),
               len(lines))
    return heading, end


def merge_facts(text: str, facts: Iterable[str]) -> tuple[str, list[str]]:
    """`text` with the facts it does not already hold added as bullets under
    FACTS_HEADING (created at the end when missing), and the facts that were added.

    The rest of the file is left exactly as the user wrote it.
    """
    known = {_fact_key(line) for line in text.splitlines()}
    added: list[str] = []
    for fact in facts:
        key = _fact_key(fact)
        if key and key not in known:
            known.add(key)
            added.append(" ".join(_BULLET.sub("", fact).split()))
    if not added:
        return text, []
    lines = text.rstrip().splitlines() if text.strip() else []
    bullets = [f"- {fact}" for fact in added]
    bounds = facts_section_bounds(lines)
    if bounds is None:
        lines += ([""] if lines else []) + [FACTS_HEADING, ""] + bullets
    else:
        heading, end = bounds
        while end > heading + 1 and not lines[end - 1].strip():
            end -= 1
        gap = [""] if end == heading + 1 else []
        tail = [""] if end < len(lines) and lines[end].strip() else []
        lines[end:end] = gap + bullets + tail
    return "\n".join(lines) + "\n", added


def trim_to_cap(text: str, cap_bytes: int) -> tuple[str, int]:
    """Cut `text` to at most `cap_bytes` UTF-8 bytes, keeping the newest facts: the oldest
    bullet lines go first, then (if that is not enough) the oldest lines of any kind.
    Returns the text and how many lines were dropped."""
    lines = text.splitlines()
    sizes = [len(line.encode("utf-8")) + 1 for line in lines]
    total = sum(sizes)
    dropped: set[int] = set()
    facts = [i for i, line in enumerate(lines) if is_fact_line(line)]
    fact_set = set(facts)
    order = facts + [i for i in range(len(lines)) if i not in fact_set]
    for index in order:
        if total <= cap_bytes:
            break
        dropped.add(index)
        total -= sizes[index]
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    return ("\n".join(kept) + "\n" if kept else ""), len(dropped)
