"""What the `exec` sandbox hides inside the workspace: the daemon's state and its secrets.

`exec` sees the workspace read-write, but not ``runtime/`` (sessions of every chat, the vault
and, by default, the vault key), not any ``.env*`` file (bot tokens, API keys), and not the
vault key wherever ``SOULFLOW_MASTER_KEY_FILE`` puts it. Directories are covered by an empty
tmpfs and files by ``/dev/null``; the masks are mounts, so a symlink, ``..`` or
``/proc/self/root`` path to them lands on the mask too.

This is the one list the sandbox uses; it takes the workspace and the environment so it
follows wherever the key lives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

KEY_FILE_ENV = "SOULFLOW_MASTER_KEY_FILE"
RUNTIME_DIR = "runtime"
DEFAULT_KEY_FILE = Path(RUNTIME_DIR) / "security" / "master.key"
# .env files are looked for this deep and no further, skipping trees that never hold them
_MAX_SCANNED = 20_000
_SKIPPED_DIRS = frozenset({RUNTIME_DIR, ".git", "node_modules", ".venv", "__pycache__"})


def masked_paths(workspace: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Existing paths the sandbox must hide, absolute; directories first, then files."""
    workspace = Path(workspace).resolve()
    env = os.environ if environ is None else environ
    # directories first, so files inside them are recognised as already hidden
    candidates: list[Path] = [workspace / RUNTIME_DIR, workspace / DEFAULT_KEY_FILE]
    key_file = env.get(KEY_FILE_ENV, "").strip()
    if key_file:
        key = Path(key_file).expanduser()
        candidates.append(key if key.is_absolute() else workspace / key)
    candidates.extend(_env_files(workspace))
    seen: set[Path] = set()
    dirs: list[Path] = []
    files: list[Path] = []
    for path in candidates:
        real = _real(path)
        if real is None or real in seen:
            continue
        if any(real.is_relative_to(d) for d in dirs):
            continue  # already hidden by a masked directory
        seen.add(real)
        (dirs if real.is_dir() else files).append(real)
    return sorted(dirs) + sorted(files)


def _real(path: Path) -> Path | None:
    """The resolved path if it exists: a mask must cover the real file, not a symlink to it."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _env_files(workspace: Path) -> list[Path]:
    """Every ``.env*`` file in the workspace (top level always, subdirectories up to a cap)."""
    found: list[Path] = []
    scanned = 0
    for root, dirnames, filenames in os.walk(workspace):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        found.extend(Path(root) / name for name in filenames if name.startswith(".env"))
        scanned += len(dirnames) + len(filenames)
        if scanned > _MAX_SCANNED:
            break
    return found
