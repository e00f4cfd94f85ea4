"""What the `exec` sandbox hides inside the workspace: the daemon's state and its secrets.

`exec` sees the workspace read-write, but not ``runtime/`` (sessions of every chat, the vault
and, by default, the vault key), not any ``.env*`` file (bot tokens, API keys), and not the
vault key wherever ``SOULFLOW_MASTER_KEY_FILE`` puts it. Directories are covered by an empty
tmpfs and files by ``/dev/null``; the masks are mounts, so a symlink, ``..`` or
``/proc/self/root`` path to them lands on the mask too.

The list itself is `soulflow.security.protected.protected_paths` (the same one the file tools
refuse), so it follows the key wherever the settings put it. This module only adds ``.env*``
files in subdirectories (that list names the root ones) and turns paths into real paths a
mount can cover.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.security.protected import RUNTIME_DIR, protected_paths

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

# .env files are looked for this far and no further, skipping trees that never hold them
_MAX_SCANNED = 20_000
_SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})


def masked_paths(workspace: Path, settings: Settings | None = None) -> list[Path]:
    """Existing real paths the sandbox must hide; directories first, and nothing that lies
    inside an already hidden directory."""
    workspace = Path(workspace).resolve()
    candidates = protected_paths(workspace, settings).mask_paths() + _nested_env_files(workspace)
    reals = {real for real in map(_real, candidates) if real is not None}
    dirs = sorted(p for p in reals if p.is_dir())
    files = sorted(p for p in reals if not p.is_dir())
    kept_dirs = [d for d in dirs if not any(d != o and d.is_relative_to(o) for o in dirs)]
    kept_files = [f for f in files if not any(f.is_relative_to(d) for d in kept_dirs)]
    return kept_dirs + kept_files


def _real(path: Path) -> Path | None:
    """The resolved path if it exists: a mask must cover the real file, not a symlink to it."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _nested_env_files(workspace: Path) -> list[Path]:
    """``.env*`` files below the workspace root (any letter case), up to a scan cap."""
    found: list[Path] = []
    scanned = 0
    for root, dirnames, filenames in os.walk(workspace):
        top = Path(root) == workspace
        dirnames[:] = [d for d in dirnames
                       if d not in _SKIPPED_DIRS and not (top and d == RUNTIME_DIR)]
        if not top:
            found.extend(Path(root) / n for n in filenames if n.casefold().startswith(".env"))
        scanned += len(dirnames) + len(filenames)
        if scanned > _MAX_SCANNED:
            break
    return found
