"""Files that arrive from chats: safe local names and writes that never leave half a file."""

from __future__ import annotations

import re
from pathlib import Path

from soulflow.storage.atomic import write_bytes_atomic

MAX_FILENAME = 100
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def safe_filename(name: str, prefix: str = "") -> str:
    """A file name that is safe on any file system: base name only, `[A-Za-z0-9._-]`.

    Never empty, never hidden (no leading dot, so never `..`), at most 100 characters
    including the `prefix` (the platform's file id, which keeps two `report.pdf` apart); a
    long name keeps its extension.
    """
    base = re.split(r"[\\/]", name or "")[-1]
    cleaned = _UNSAFE_NAME_CHARS.sub("_", base).lstrip(".") or "file"
    head = _UNSAFE_NAME_CHARS.sub("_", prefix).lstrip(".")
    head = f"{head}_" if head else ""
    stem, dot, ext = cleaned.rpartition(".")
    room = MAX_FILENAME - len(head)
    if len(cleaned) > room and dot and stem and len(ext) < 16:
        cleaned = stem[: room - len(ext) - 1] + "." + ext
    return (head + cleaned)[:MAX_FILENAME]


def write_file_atomically(target: Path, data: bytes) -> None:
    """Write via storage's atomic writer (temp file, fsync, rename): a crash never leaves a
    truncated attachment under `target`. Blocking: adapters call it in a worker thread."""
    write_bytes_atomic(target, data)
