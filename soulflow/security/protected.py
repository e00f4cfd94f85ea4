"""What the agent's tools may touch: the trust zones as file-tool rules, and what no tool may.

One module, used in two places: the file tools (`read_file`, `write_file`, `edit_file`,
`list_dir`) ask `ProtectedPaths.judge` about every path, and the code sandbox (`exec`,
`python_repl`) masks `mask_paths`. Keeping the rules here means the two can never disagree on
what is secret.

The workspace is cut in three zones (`soulflow.security.zones`, docs/security.md):

* **Your own chat zone**, ``chats/<zone>/`` of the run's chat (`zone_for`): read and written
  freely - the chat's working files, the attachments people sent in it (``files/``), its
  memory.
* **The operator zone**, everything else that is not below: templates, agent roles, skills,
  global memory, ``HEARTBEAT.md``, code, virtualenvs. Every run loads some of it as
  instructions, so a tool reads it but writes it only through a call an admin or the local
  operator approved (`Access.OPERATOR`; the file tools ask an admins-only approval).
* **Refused, whoever approves** (`Access.REFUSED`):

  - ``runtime/``, the daemon's zone: every chat's sessions, journals, the vault;
  - ``chats/`` itself and **another chat's zone**: listing ``chats/`` would name every other
    chat, and one chat's files are not another's;
  - **``.env*`` anywhere** (any path part whose name starts with ``.env``): platform tokens
    and API keys;
  - **the master key and the vault**, wherever ``SOULFLOW_MASTER_KEY_FILE`` puts the key,
    by name and by device/inode on the opened file (`check_opened`), so a hard link planted
    under another name is recognised as the key it is.

Paths are judged as workspace-relative, lexically normalised paths (``chats/a/../b`` is
``chats/b``). That is only sound because the file tools then open them with
`soulflow.storage.beneath.Beneath`, which follows no symbolic link in any component: the
path judged is the path opened. ``chats``, ``runtime`` and ``.env`` are compared
case-insensitively (on a case-insensitive filesystem ``Runtime/`` is ``runtime/``); only the
exact spelling ``chats/<your zone>`` is your own zone, so a case variant that might be another
chat's folder on such a filesystem is refused rather than guessed at.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from soulflow.security.zones import CHATS_DIR, RUNTIME_DIR, ChatZone

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.backends.base import Offload, SecretEntries
    from soulflow.config import Settings
    from soulflow.security.vault import SecretVault

SECURITY_DIR = "security"
KEY_FILE_NAME = "master.key"
VAULT_FILE_NAME = "secrets.json"

_ENV_PREFIX = ".env"
_MAX_INODE_SCAN = 20_000  # files under runtime/ compared when a hard link is checked

DevIno = tuple[int, int]

__all__ = [
    "KEY_FILE_NAME",
    "RUNTIME_DIR",
    "SECURITY_DIR",
    "VAULT_FILE_NAME",
    "Access",
    "PathRule",
    "ProtectedPaths",
    "inodes_of",
    "key_file_path",
    "open_vault",
    "protected_paths",
]


class Access(StrEnum):
    """What a file tool may do with a path (see the module docstring)."""

    OWN = "own"  # the run's own chat zone: read and write
    OPERATOR = "operator"  # read; a write needs an admin's (or the local operator's) approval
    REFUSED = "refused"  # never, whoever approves


@dataclass(frozen=True, slots=True)
class PathRule:
    """The verdict on one workspace-relative path: ``reason`` says why it is refused."""

    access: Access
    reason: str = ""


def inodes_of(paths: list[Path]) -> set[DevIno]:
    """(device, inode) of each path that exists (a hard link shares its target's)."""
    found: set[DevIno] = set()
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def key_file_path(workspace: Path, configured: str = "") -> Path:
    """Where the master key lives: ``SOULFLOW_MASTER_KEY_FILE`` (relative to the workspace
    when not absolute) or, by default, ``runtime/security/master.key``."""
    if configured.strip():
        path = Path(configured.strip()).expanduser()
        return path if path.is_absolute() else Path(workspace) / path
    return Path(workspace) / RUNTIME_DIR / SECURITY_DIR / KEY_FILE_NAME


def open_vault(settings: Settings, entries: SecretEntries,
               offload: Offload | None = None) -> SecretVault:
    """The workspace's vault, with its key where ``SOULFLOW_MASTER_KEY_FILE`` says (the daemon
    and `soulflow secret` must agree on it, so both call this). `entries`: the backend's
    sealed entries (``secrets.json``, or the Redis hash); `offload`: the backend's, where the
    daemon's loop runs the vault's calls (`SecretVault.offload`)."""
    from soulflow.security.vault import SecretVault

    configured = str(settings.values.get("SOULFLOW_MASTER_KEY_FILE", "") or "")
    security_dir = Path(settings.workspace) / RUNTIME_DIR / SECURITY_DIR
    key = key_file_path(settings.workspace, configured) if configured.strip() else None
    return SecretVault(security_dir, key_path=key, entries=entries, offload=offload)


class _RuntimeInodes:
    """The hard-linked files under ``runtime/``, scanned at most once per pinned guard."""

    def __init__(self, runtime_dir: Path) -> None:
        self._runtime_dir = runtime_dir
        self._found: set[DevIno] | None = None

    def get(self) -> set[DevIno]:
        if self._found is None:
            self._found = _scan_runtime_inodes(self._runtime_dir)
        return self._found


@dataclass(frozen=True, slots=True)
class ProtectedPaths:
    """The protected locations of one workspace; see the module docstring for the rules.

    ``workspace`` and every path here are absolute and resolved. `judge` answers "what may a
    file tool do with this path?"; `check_opened` is the inode rule on a file it opened;
    `mask_paths` is what a sandbox must hide.
    """

    workspace: Path
    runtime_dir: Path
    security_dir: Path
    vault_file: Path
    key_file: Path
    _extra_keys: tuple[Path, ...] = field(default=())
    _pinned_key_inodes: frozenset[DevIno] | None = None  # see `pinned`
    _pinned_runtime: _RuntimeInodes | None = None

    # ----------------------------------------------------------------- for sandboxes

    def env_files(self) -> list[Path]:
        """Existing ``.env*`` entries at the workspace root (any letter case)."""
        try:
            return sorted(p for p in self.workspace.iterdir()
                          if p.name.casefold().startswith(_ENV_PREFIX))
        except OSError:
            return []

    def key_files(self) -> list[Path]:
        """The key, a rotation's pending key, and the vault file: the secret material."""
        pending = self.key_file.with_name(self.key_file.name + ".new")
        return [self.key_file, pending, self.vault_file, *self._extra_keys]

    def mask_paths(self) -> list[Path]:
        """Everything a sandbox with the workspace mounted must hide (existing paths only):
        `runtime/`, each root ``.env*`` file, and the key/vault when they live elsewhere."""
        paths = [self.runtime_dir, *self.env_files()]
        paths += [p for p in self.key_files() if not p.is_relative_to(self.runtime_dir)]
        return [p for p in paths if os.path.lexists(p)]

    def check(self, path: Path, zone: ChatZone | None = None) -> str | None:
        """Why no tool of a run in ``zone`` may use the absolute ``path``, or None if it may
        (reading, at least): `judge` plus the inode rule on what is there now."""
        try:
            rel = PurePosixPath(Path(os.path.normpath(path)).relative_to(self.workspace))
        except ValueError:
            return self._key_name_reason(Path(os.path.normpath(path)))
        rule = self.judge(rel, zone)
        if rule.access is Access.REFUSED:
            return rule.reason
        try:
            st = path.stat()
        except OSError:
            return None
        return self.check_opened(st)

    # ----------------------------------------------------------------- for file tools

    def judge(self, rel: PurePosixPath, zone: ChatZone | None) -> PathRule:
        """What a file tool of a run working in ``zone`` may do with ``rel``: a normalised
        workspace-relative path (no ``..``, no ``.``; the root is ``PurePosixPath()``).

        ``zone`` None (no chat: a check made for nobody in particular) leaves every chat
        zone refused."""
        parts = rel.parts
        folded = [p.casefold() for p in parts]
        if any(p.startswith(_ENV_PREFIX) for p in folded):
            return PathRule(Access.REFUSED, ".env files hold credentials")
        key_reason = self._key_name_reason(self.workspace.joinpath(*parts))
        if key_reason is not None:
            return PathRule(Access.REFUSED, key_reason)
        if not parts:
            return PathRule(Access.OPERATOR)
        if folded[0] == RUNTIME_DIR:
            return PathRule(Access.REFUSED, "runtime/ is the daemon's: it holds the vault and "
                            "every chat's sessions and journals, and no tool reaches it")
        if folded[0] != CHATS_DIR:
            return PathRule(Access.OPERATOR)
        yours = f" (this chat's folder is {zone.rel.as_posix()}/)" if zone is not None else ""
        if len(parts) == 1:
            return PathRule(Access.REFUSED, "chats/ holds every chat's folder; no tool lists "
                            f"or opens it{yours}")
        if zone is not None and parts[0] == CHATS_DIR and parts[1] == zone.name:
            return PathRule(Access.OWN)
        return PathRule(Access.REFUSED, f"chats/{parts[1]}/ is another chat's folder, only "
                        f"that chat's runs use it{yours}")

    def check_opened(self, st: os.stat_result) -> str | None:
        """The inode rule on an already opened (or ``lstat``-ed) file's stat: what a reader
        checks on the descriptor it opened, so a name swapped between a check and the open
        cannot slip a secret through."""
        if not stat.S_ISREG(st.st_mode):
            return None
        ident = (st.st_dev, st.st_ino)
        if ident in self.key_inodes():
            return "it is a link to the vault's master key, the vault or a .env file"
        if st.st_nlink > 1 and ident in self._runtime_inodes():
            return "it is a hard link to a file under runtime/"
        return None

    def key_inodes(self) -> set[DevIno]:
        """The (device, inode) of the vault key, the vault and the .env files: a link to any
        of them is refused here and masked in the sandbox."""
        if self._pinned_key_inodes is not None:
            return set(self._pinned_key_inodes)
        return inodes_of([*self.key_files(), *self.env_files()])

    def pinned(self) -> ProtectedPaths:
        """This guard with `key_inodes` read once (and the runtime hard links scanned at most
        once), for one operation that checks many files: `list_dir` checks every entry."""
        return replace(self, _pinned_key_inodes=frozenset(self.key_inodes()),
                       _pinned_runtime=_RuntimeInodes(self.runtime_dir))

    # ----------------------------------------------------------------- internals

    def _key_name_reason(self, path: Path) -> str | None:
        """The key or the vault under its own name (the default lies in runtime/, which is
        refused anyway; ``SOULFLOW_MASTER_KEY_FILE`` may put it anywhere)."""
        folded = str(path).casefold()
        if any(folded == str(p).casefold() for p in self.key_files()) or \
                path.is_relative_to(self.security_dir):
            return "it is the vault's master key or the vault"
        return None

    def _runtime_inodes(self) -> set[DevIno]:
        if self._pinned_runtime is not None:
            return self._pinned_runtime.get()
        return _scan_runtime_inodes(self.runtime_dir)


def protected_paths(workspace: Path, settings: Settings | None = None, *,
                    key_file: Path | None = None) -> ProtectedPaths:
    """The protected paths of ``workspace``: THE rules, for file tools and sandboxes alike.

    The key file comes from ``key_file`` if given, else from ``settings``'
    ``SOULFLOW_MASTER_KEY_FILE``, else the default inside ``runtime/security/``.
    """
    root = Path(workspace).resolve()
    if key_file is None:
        configured = ""
        if settings is not None:
            configured = str(settings.values.get("SOULFLOW_MASTER_KEY_FILE", "") or "")
        key_file = key_file_path(root, configured)
    runtime_dir = root / RUNTIME_DIR
    security_dir = runtime_dir / SECURITY_DIR
    default_key = security_dir / KEY_FILE_NAME
    resolved_key = _resolve(key_file)
    extra = () if resolved_key == default_key else (default_key,)
    return ProtectedPaths(workspace=root, runtime_dir=runtime_dir, security_dir=security_dir,
                          vault_file=security_dir / VAULT_FILE_NAME, key_file=resolved_key,
                          _extra_keys=extra)


def _resolve(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _scan_runtime_inodes(runtime_dir: Path) -> set[DevIno]:
    """(device, inode) of the multiply linked files under ``runtime/`` (bounded walk)."""
    found: set[DevIno] = set()
    for count, path in enumerate(_walk_files(runtime_dir)):
        if count >= _MAX_INODE_SCAN:
            break
        try:
            st = path.lstat()
        except OSError:
            continue
        if st.st_nlink > 1:
            found.add((st.st_dev, st.st_ino))
    return found


def _walk_files(root: Path) -> Iterator[Path]:
    for current, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            yield Path(current) / name
