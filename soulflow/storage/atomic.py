"""Atomic files: a reader never sees half a file, and a corrupt file is never lost.

This is the one atomic writer of the code base (JSON stores, the vault, the key file, memory,
attachments, the workspace scaffold). Writers replace the whole file (temp file, fsync,
rename, fsync of the directory), so after a crash the file holds either the old or the new
content; `create_exclusive` creates a file that must never be overwritten (the vault key).
Readers that find a file they cannot parse move it aside and say so in the log, because
silently starting from empty state would destroy the user's data a second time.
"""

from __future__ import annotations

import contextlib
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


def write_all(fd: int, data: bytes) -> None:
    """`os.write` until every byte is written (a write may take only part of its buffer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


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


def write_text_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2, mode: int = 0o644,
                      sort_keys: bool = False, ensure_ascii: bool = False) -> None:
    """Serialise `data` as JSON and replace `path` atomically."""
    text = json.dumps(data, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)
    write_bytes_atomic(path, (text + "\n").encode("utf-8"), mode=mode)


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Durably create `path` holding `data`; never overwrite: `FileExistsError` if it exists.

    The temp file is created with `mode` (no window with wider permissions) and hard-linked
    into place, so a crash never leaves a half-written file and two processes racing to create
    it cannot overwrite each other. Filesystems without hard links fall back to a rename after
    an existence check.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask or an ACL default may have narrowed or widened it
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:
            if path.exists():
                raise FileExistsError(path) from None
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)


def replace_durably(source: Path, target: Path) -> None:
    """Rename `source` over `target` and make the rename survive a power loss."""
    os.replace(source, target)
    fsync_dir(target.parent)


def quarantine_name(path: Path) -> Path:
    """A free `<name>.corrupt-<stamp>[-n]` beside `path`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
        counter += 1
    return target


def quarantine(path: Path, reason: str) -> Path:
    """Move a file we cannot read aside (never delete it) and log where it went."""
    target = quarantine_name(path)
    replace_durably(path, target)
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
