"""What the `exec` sandbox hides inside the workspace, and the few runtime files it shows.

`exec` sees the workspace read-write, but not ``runtime/`` (sessions of every chat, the vault
and, by default, the vault key), not any ``.env*`` file (bot tokens, API keys), not the vault
key wherever ``SOULFLOW_MASTER_KEY_FILE`` puts it, and not a hard link to the key or a
``.env`` file under another name. Directories are covered by an empty tmpfs and files by
``/dev/null``; the masks are mounts, so a symlink, ``..`` or ``/proc/self/root`` path to them
lands on the mask too.

The list is `soulflow.security.protected.protected_paths` (the same one the file tools
refuse), so it follows the key wherever the settings put it; this module adds what only a
walk of the workspace finds (``.env*`` files in subdirectories, hard links) and turns paths
into real paths a mount can cover.

`shared_runtime_paths` is the way back in for what the file tools may open too: the chat's
own attachments that the command names (``runtime/inbound-files/<provider>/<id>_<name>``,
unguessable names, never listed) and ``runtime/diagrams/``, mounted read-only over the mask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.security.protected import RUNTIME_DIR, ChatScope, protected_paths

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

_MAX_SCANNED = 20_000  # the walk stops after this many entries
_SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})


def masked_paths(workspace: Path, settings: Settings | None = None) -> list[Path]:
    """Existing real paths the sandbox must hide; directories first, and nothing that lies
    inside an already hidden directory."""
    workspace = Path(workspace).resolve()
    protected = protected_paths(workspace, settings)
    candidates = protected.mask_paths()
    secret_inodes = protected.key_inodes()
    candidates += _walk(workspace, secret_inodes)
    reals = {real for real in map(_real, candidates) if real is not None}
    dirs = sorted(p for p in reals if p.is_dir())
    files = sorted(p for p in reals if not p.is_dir())
    kept_dirs = [d for d in dirs if not any(d != o and d.is_relative_to(o) for o in dirs)]
    kept_files = [f for f in files if not any(f.is_relative_to(d) for d in kept_dirs)]
    return kept_dirs + kept_files


def shared_runtime_paths(workspace: Path, words: list[str], chat: ChatScope,
                         settings: Settings | None = None) -> list[Path]:
    """Paths under ``runtime/`` named in ``words`` that the file tools would let ``chat``
    open (its attachments, ``runtime/diagrams/``): mounted read-only inside the mask."""
    workspace = Path(workspace).resolve()
    runtime = workspace / RUNTIME_DIR
    protected = protected_paths(workspace, settings, chat=chat)
    shared: list[Path] = []
    for word in words:
        if RUNTIME_DIR not in word:
            continue
        path = Path(word)
        real = _real(path if path.is_absolute() else workspace / path)
        if real is None or real in shared or not real.is_relative_to(runtime):
            continue
        if protected.check(real) is None:
            shared.append(real)
    return shared


def _real(path: Path) -> Path | None:
    """The resolved path if it exists: a mask must cover the real file, not a symlink to it."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _walk(workspace: Path, secret_inodes: set[tuple[int, int]]) -> list[Path]:
    """``.env*`` files below the root (any letter case) and hard links to a secret, up to a
    scan cap; ``runtime/`` is skipped (it is masked whole)."""
    found: list[Path] = []
    scanned = 0
    for root, dirnames, filenames in os.walk(workspace):
        top = Path(root) == workspace
        dirnames[:] = [d for d in dirnames
                       if d not in _SKIPPED_DIRS and not (top and d == RUNTIME_DIR)]
        for name in filenames:
            path = Path(root) / name
            nested_env = not top and name.casefold().startswith(".env")
            if nested_env or (secret_inodes and _is_link_to(path, secret_inodes)):
                found.append(path)
        scanned += len(dirnames) + len(filenames)
        if scanned > _MAX_SCANNED:
            break
    return found


def _is_link_to(path: Path, inodes: set[tuple[int, int]]) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_nlink > 1
            and (st.st_dev, st.st_ino) in inodes)
