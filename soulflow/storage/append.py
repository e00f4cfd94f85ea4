"""Appending text to a file: the one append path for files that are not JSONL journals.

Daily memory notes and per-task detail logs grow by paragraphs. Each append is one `os.write`
on an `O_APPEND` descriptor, so two writers never interleave inside a paragraph and a crash
leaves at most a cut-off last paragraph. `fsync=True` makes it durable before returning (call
it from a worker thread when on the event loop).
"""

from __future__ import annotations

import os
from pathlib import Path

from soulflow.storage.atomic import fsync_dir, write_all


def append_text(path: Path, text: str, *, header: str = "", fsync: bool = False,
                mode: int = 0o644) -> None:
    """Append `text`; `header` is written first when the file is created by this call."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, mode)
        created = True
    except FileExistsError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        created = False
    try:
        write_all(fd, ((header if created else "") + text).encode("utf-8"))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if created and fsync:
        fsync_dir(path.parent)
