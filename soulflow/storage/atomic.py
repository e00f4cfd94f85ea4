"""Atomic JSON files: a reader never sees half a file, and a corrupt file is never lost.

Writers replace the whole file (temp file, fsync, rename, fsync of the directory), so after a
crash the file holds either the old or the new content. Readers that find a file they cannot
parse move it aside and say so in the log, because silently starting from empty state would
destroy the user's data a second time.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: the directory entry must reach the disk too."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that readers and crashes see old or new, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2, mode: int = 0o644) -> None:
    """Serialise `data` as JSON and replace `path` atomically."""
    text = json.dumps(data, ensure_ascii=False, indent=indent, sort_keys=False)
    write_bytes_atomic(path, (text + "\n").encode("utf-8"), mode=mode)


def quarantine(path: Path, reason: str) -> Path:
    """Move a file we cannot read aside (never delete it) and log where it went."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
        counter += 1
    os.replace(path, target)
    log.error("%s is unreadable (%s); moved it aside to %s and continuing without it",
              path, reason, target)
    return target


def read_json(path: Path, default: Any) -> Any:
    """Read a JSON file; a missing file gives `default`, a corrupt or empty one is quarantined.

    `default` is returned as-is, so pass a fresh object (or a factory result) when the caller
    mutates it.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return default
    if not raw.strip():
        quarantine(path, "the file is empty")
        return default
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        quarantine(path, f"invalid JSON: {exc}")
        return default
