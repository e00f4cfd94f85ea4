"""Follow the daemon's inbound journal from outside, as it grows and across compactions.

A compaction rewrites the file (new inode, or shorter than what was read): reading starts
again from the top, and the readers count by message key, so nothing counts twice. A line
still being written is left for the next read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class JournalTail:
    path: Path
    _offset: int = 0
    _inode: int = 0

    def new_records(self) -> Iterator[dict[str, Any]]:
        """The whole records appended since the last call (all of them after a rewrite)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._offset = stat.st_ino, 0  # rewritten by compaction
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for raw in data[:end].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
