"""Files that arrive from chats: safe local names (the bytes are written by storage's atomic
writer, `write_bytes_atomic`, in a worker thread)."""

from __future__ import annotations

import re

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
