"""What nothing the agent calls may touch: the vault key, the vault, `.env*` and runtime state.

One list, used in two places: the file tools (`read_file`, `write_file`, `edit_file`,
`list_dir`) refuse these paths, and the code sandbox (`exec`, `python_repl`) masks them. Keeping
the list here, in one function (`protected_paths`), means the two can never disagree.

The rule, and why it is this blunt:

* **The whole `runtime/` tree is off limits**, not just `runtime/security/`: it holds every
  chat's sessions, thread journals, inbound journal, outbox and DLQ, so a narrower list would
  leak one chat's conversation into another's. Two exceptions, both things the agent is meant
  to use: `runtime/diagrams/` (SVGs the `diagram_render` tool writes for the model) and the
  current chat's attachments under `runtime/inbound-files/<provider>/`.
* **Attachments**: channels save files as `runtime/inbound-files/<provider>/<file-id>_<name>`
  (the platform's file id, or a hash of it, keeps names unguessable) and tell the model that
  exact path. A run may open such a file by name only on its own provider, and may never list
  the directory, so the names of other chats' files are never shown. A per-chat subdirectory
  `runtime/inbound-files/<provider>/<chat-dir>/` (see `chat_dir_name`) is opened only by that
  chat, listing included.
* **`.env*` anywhere** (any path part whose name starts with `.env`, in any letter case): these
  files hold the platform tokens and API keys.
* **The master key**, wherever `SOULFLOW_MASTER_KEY_FILE` puts it (inside or outside the
  workspace), and the vault file, compared by real path *and* by device/inode, so a hard link
  planted in the workspace is recognised as the key it is.

Names are compared case-insensitively (`Runtime/`, `.ENV`): on a case-insensitive filesystem
those are the same files, and refusing them on a case-sensitive one costs nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings
    from soulflow.security.vault import SecretVault
    from soulflow.security.vault_entries import SecretEntries

RUNTIME_DIR = "runtime"
SECURITY_DIR = "security"
KEY_FILE_NAME = "master.key"
VAULT_FILE_NAME = "secrets.json"
INBOUND_FILES_DIR = "inbound-files"
OPEN_RUNTIME_DIRS: tuple[str, ...] = ("diagrams",)
"""Subdirectories of `runtime/` that hold agent output, not state: open to file tools."""

_ENV_PREFIX = ".env"
_MAX_INODE_SCAN = 20_000  # files under runtime/ compared when a hard link is checked

DevIno = tuple[int, int]


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


def open_vault(settings: Settings, *, entries: SecretEntries | None = None) -> SecretVault:
    """The workspace's vault, with its key where ``SOULFLOW_MASTER_KEY_FILE`` says (the daemon
    and `soulflow secret` must agree on it, so both call this). `entries`: where the sealed
    entries live when not in ``secrets.json`` (the Redis backend's hash)."""
    from soulflow.security.vault import SecretVault

    configured = str(settings.values.get("SOULFLOW_MASTER_KEY_FILE", "") or "")
    security_dir = Path(settings.workspace) / RUNTIME_DIR / SECURITY_DIR
    key = key_file_path(settings.workspace, configured) if configured.strip() else None
    return SecretVault(security_dir, key_path=key, entries=entries)


def chat_dir_name(chat_id: str) -> str:
    """The per-chat directory name under ``runtime/inbound-files/<provider>/``."""
    return "c" + hashlib.sha256(str(chat_id).encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class ChatScope:
    """The chat a file-tool call runs for (what its attachments are)."""

    provider: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class ProtectedPaths:
    """The protected locations of one workspace; see the module docstring for the rule.

    ``workspace`` and every path here are absolute and resolved. `check` answers "may a file
    tool touch this path?"; `mask_paths` is what a sandbox must hide.
    """

    workspace: Path
    runtime_dir: Path
    security_dir: Path
    vault_file: Path
    key_file: Path
    chat: ChatScope | None = None
    _extra_keys: tuple[Path, ...] = field(default=())
    _pinned_key_inodes: frozenset[DevIno] | None = None  # see `pinned`

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

    # ----------------------------------------------------------------- for file tools

    def check(self, path: Path, *, listing: bool = False) -> str | None:
        """Why a file tool may not use resolved ``path``, or None if it may.

        ``listing`` is True for `list_dir` on a directory (stricter for attachment folders).
        """
        reason = self._check_name(path, listing=listing)
        if reason is not None:
            return reason
        return self._check_inode(path)

    def check_lexical(self, relative: PurePosixPath) -> str | None:
        """The same name rules on the path as written (before symlinks are followed)."""
        normal = PurePosixPath(os.path.normpath(relative.as_posix()))
        if normal.parts and normal.parts[0] == "..":
            return None  # the containment check refuses these with a better message
        return self._check_name(self.workspace / normal, listing=False)

    def visible(self, path: Path) -> bool:
        """Whether `list_dir` may show this entry (it is not resolved: links are shown)."""
        if self._check_name(path, listing=False) is not None:
            return False
        try:
            target = path.resolve()
        except (OSError, RuntimeError):
            return True
        if not target.is_relative_to(self.workspace):
            return True  # shown, but every tool refuses to follow it
        return self.check(target) is None

    def _check_name(self, path: Path, *, listing: bool) -> str | None:
        if self._same_file_name(path):
            return "it is the vault's master key or the vault"
        try:
            parts = path.relative_to(self.workspace).parts
        except ValueError:
            return None  # outside the workspace: the containment check handles it
        folded = [p.casefold() for p in parts]
        if any(p.startswith(_ENV_PREFIX) for p in folded):
            return ".env files hold credentials"
        if not folded or folded[0] != RUNTIME_DIR:
            return None
        if self._open_runtime_path(parts, path, listing=listing):
            return None
        return ("runtime/ holds the vault and every chat's state (only this chat's "
                "attachments and runtime/diagrams/ are open to file tools)")

    def _open_runtime_path(self, parts: tuple[str, ...], path: Path, *, listing: bool) -> bool:
        if len(parts) >= 2 and parts[1] in OPEN_RUNTIME_DIRS:
            return True
        if self.chat is None or len(parts) < 4 or parts[1] != INBOUND_FILES_DIR:
            return False
        if parts[2] != self.chat.provider:
            return False
        if parts[3] == chat_dir_name(self.chat.chat_id):
            return True
        # a flat attachment file: opened by exact name, never listed, never a directory
        return len(parts) == 4 and not listing and not path.is_dir()

    def _same_file_name(self, path: Path) -> bool:
        return any(path == p for p in self.key_files()) or path == self.security_dir \
            or path.is_relative_to(self.security_dir)

    def _check_inode(self, path: Path) -> str | None:
        """Hard links: the same file under another name is the same secret."""
        try:
            st = path.stat()
        except OSError:
            return None
        return self.check_opened(st)

    def check_opened(self, st: os.stat_result) -> str | None:
        """The inode rule on an already opened file's ``fstat``: what a reader checks after
        ``open`` so a path swapped between the check and the open cannot slip through."""
        if not stat.S_ISREG(st.st_mode):
            return None
        ident = (st.st_dev, st.st_ino)
        if ident in self.key_inodes():
            return "it is a link to the vault's master key or the vault"
        if st.st_nlink > 1 and ident in self._runtime_inodes():
            return "it is a hard link to a protected file"
        return None

    def key_inodes(self) -> set[DevIno]:
        """The (device, inode) of the vault key, the vault and the .env files: a link to any
        of them is refused here and masked in the sandbox."""
        if self._pinned_key_inodes is not None:
            return set(self._pinned_key_inodes)
        return inodes_of([*self.key_files(), *self.env_files()])

    def pinned(self) -> ProtectedPaths:
        """This guard with `key_inodes` read once, for one operation that checks many paths
        (`list_dir` checks every entry: otherwise each one lists the workspace root and stats
        the key files again)."""
        return replace(self, _pinned_key_inodes=frozenset(self.key_inodes()))

    def _runtime_inodes(self) -> set[DevIno]:
        found: set[DevIno] = set()
        for count, path in enumerate(_walk_files(self.runtime_dir)):
            if count >= _MAX_INODE_SCAN:
                break
            try:
                st = path.lstat()
            except OSError:
                continue
            if st.st_nlink > 1:
                found.add((st.st_dev, st.st_ino))
        return found


def protected_paths(workspace: Path, settings: Settings | None = None, *,
                    key_file: Path | None = None,
                    chat: ChatScope | None = None) -> ProtectedPaths:
    """The protected paths of ``workspace``: THE list, for file tools and sandboxes alike.

    The key file comes from ``key_file`` if given, else from ``settings``'
    ``SOULFLOW_MASTER_KEY_FILE``, else the default inside ``runtime/security/``. ``chat``
    opens that chat's attachments (file tools pass it; sandboxes do not).
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
                          chat=chat, _extra_keys=extra)


def _resolve(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _walk_files(root: Path) -> Iterator[Path]:
    for current, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            yield Path(current) / name
