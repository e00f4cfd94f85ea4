"""Markdown memory the agent reads every turn: `memory/MEMORY.md` and daily notes.

Plain files on purpose: the user can open, edit and version them with any editor.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from soulflow.storage.append import append_text
from soulflow.storage.atomic import write_bytes_atomic

LONG_TERM_FILE = "MEMORY.md"
FACTS_HEADING = "## Learned from conversations"
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_TOP_HEADING = re.compile(r"^#{1,2}\s")


@dataclass(slots=True)
class MemoryHit:
    file: str
    line_number: int
    line: str


class MemoryStore:
    """Long-term memory and one note per day, with a plain case-insensitive search."""

    def __init__(self, directory: Path, *, today: Callable[[], dt.date] = dt.date.today) -> None:
        self.directory = directory
        self._today = today

    @property
    def long_term_path(self) -> Path:
        return self.directory / LONG_TERM_FILE

    def daily_path(self, day: dt.date | None = None) -> Path:
        return self.directory / f"{(day or self._today()).isoformat()}.md"

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def read_long_term(self) -> str:
        return self._read(self.long_term_path)

    def write_long_term(self, text: str) -> None:
        write_bytes_atomic(self.long_term_path, text.encode("utf-8"))

    def replace_long_term(self, expected: str, text: str) -> bool:
        """Write `text` only if the file still holds `expected`; False (nothing written) if it
        changed meanwhile. Background writers (consolidation) read, then wait for a model,
        then write: a user's edit made during that wait must win, not be overwritten."""
        if self.read_long_term() != expected:
            return False
        self.write_long_term(text)
        return True

    def read_daily(self, day: dt.date | None = None) -> str:
        return self._read(self.daily_path(day))

    def read_daily_tail(self, max_bytes: int, day: dt.date | None = None) -> tuple[str, bool]:
        """The newest whole paragraphs of the day's note within `max_bytes`, and whether older
        ones were left out. Reads only the file's end: a busy day's note (one summary per
        consolidation) grows all day, and the prompt reads it every second."""
        try:
            with self.daily_path(day).open("rb") as file:
                size = file.seek(0, 2)
                if size <= max_bytes:
                    file.seek(0)
                    return file.read().decode("utf-8", errors="replace"), False
                file.seek(size - max_bytes)
                tail = file.read().decode("utf-8", errors="ignore")
        except FileNotFoundError:
            return "", False
        start = tail.find("\n\n")  # the first paragraph is likely cut: start after it
        return (tail[start + 2:] if start >= 0 else tail.partition("\n")[2]), True

    def append_daily(self, text: str, day: dt.date | None = None) -> None:
        """Add a paragraph to the day's note (creates it with a heading)."""
        append_text(self.daily_path(day), f"{text.rstrip()}\n\n",
                    header=f"# {(day or self._today()).isoformat()}\n\n")

    def append_long_term(self, text: str) -> None:
        current = self.read_long_term()
        separator = "" if not current or current.endswith("\n\n") else (
            "\n" if current.endswith("\n") else "\n\n")
        self.write_long_term(f"{current}{separator}{text.rstrip()}\n")

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*.md"))

    def search(self, query: str, *, limit: int = 50) -> list[MemoryHit]:
        """Lines containing every word of `query`, newest daily notes first after MEMORY.md."""
        words = [w.casefold() for w in query.split() if w]
        if not words:
            return []
        files = self.files()
        long_term = [p for p in files if p.name == LONG_TERM_FILE]
        daily = sorted((p for p in files if p.name != LONG_TERM_FILE), reverse=True)
        hits: list[MemoryHit] = []
        for path in long_term + daily:
            for number, line in enumerate(self._read(path).splitlines(), start=1):
                folded = line.casefold()
                if all(w in folded for w in words):
                    hits.append(MemoryHit(path.name, number, line))
                    if len(hits) >= limit:
                        return hits
        return hits


# -- editing MEMORY.md as a list of facts (used by consolidation) ---------------------------


def _fact_key(line: str) -> str:
    """How two facts are compared: no bullet, case, spacing or final full stop."""
    return " ".join(_BULLET.sub("", line).casefold().split()).rstrip(".")


def is_fact_line(line: str) -> bool:
    return bool(_BULLET.match(line))


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
    heading = next((i for i, line in enumerate(lines) if line.strip() == FACTS_HEADING), None)
    if heading is None:
        lines += ([""] if lines else []) + [FACTS_HEADING, ""] + bullets
    else:
        end = next((i for i in range(heading + 1, len(lines)) if _TOP_HEADING.match(lines[i])),
                   len(lines))
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
