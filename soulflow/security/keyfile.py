"""Creating, checking and reading ``master.key`` and its private directory.

The key is the only thing standing between ``secrets.json`` and plaintext, so it is refused -
not repaired - when its permissions are loose: silently chmod-ing would hide the fact that it
may already have been read. Creation goes through storage's `create_exclusive` (a 0600 temp
file hard-linked into place), so a crash never leaves a half-written key and two processes
racing to create one cannot overwrite each other.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from soulflow.security.crypto import KEY_SIZE
from soulflow.security.errors import InvalidKeyError, KeyPermissionError
from soulflow.storage.atomic import create_exclusive

log = logging.getLogger(__name__)

_POSIX = os.name == "posix"
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700; warn (not fail) if an existing one is wider.

    The key file itself is what is enforced; a wide directory only lets others list names.
    """
    if not path.exists():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
        return
    if _POSIX and stat.S_IMODE(path.stat().st_mode) & 0o077:
        log.warning(
            "security directory %s is accessible by group/others; run `chmod 700 %s`", path, path
        )


def read_key(path: Path) -> bytes:
    """Read and vet a key file; raise a `KeyFileError` subclass instead of using a bad key.

    Checks happen on the opened descriptor (``fstat``), so a file swapped between check and
    read cannot slip through. Symlinks are refused outright.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW)
    except OSError as exc:
        if path.is_symlink():
            raise KeyPermissionError(
                f"{path} is a symlink; replace it with the real key file (mode 600)."
            ) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyPermissionError(f"{path} is not a regular file; restore the key file.")
        mode = stat.S_IMODE(st.st_mode)
        if _POSIX and mode & 0o077:
            raise KeyPermissionError(
                f"{path} is accessible by group/others (mode {mode:o}); run `chmod 600 {path}`."
            )
        data = os.read(fd, KEY_SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_SIZE:
        size = f"{len(data)} bytes" if len(data) <= KEY_SIZE else f"more than {KEY_SIZE} bytes"
        raise InvalidKeyError(
            f"{path} holds {size}, expected exactly {KEY_SIZE}; restore the original key "
            "from backup."
        )
    return data


def write_key(path: Path, key: bytes) -> None:
    """Durably create ``path`` holding ``key`` with mode 0600; never overwrite.

    Raises `FileExistsError` if ``path`` already exists (another process won the race).
    """
    if len(key) != KEY_SIZE:
        raise InvalidKeyError(f"refusing to write a {len(key)}-byte key; expected {KEY_SIZE}.")
    create_exclusive(path, key, mode=0o600)
