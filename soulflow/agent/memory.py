"""Markdown memory the agent reads every turn: `memory/MEMORY.md` and daily notes.

Plain files on purpose: the user can open, edit and version them with any editor.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from soulflow.storage.atomic import write_bytes_atomic

LONG_TERM_FILE = "MEMORY.md"


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

    def read_daily(self, day: dt.date | None = None) -> str:
        return self._read(self.daily_path(day))

    def append_daily(self, text: str, day: dt.date | None = None) -> None:
        """Add a paragraph to the day's note (creates it with a heading)."""
        path = self.daily_path(day)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = "" if path.exists() else f"# {(day or self._today()).isoformat()}\n\n"
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{header}{text.rstrip()}\n\n")

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
