"""Keeping file tools inside the agent's workspace, and knowing which writes are routine.

Every path a model gives is relative to the workspace (or absolute but lexically inside it, as
channels name saved attachments). `resolve_in_workspace` refuses anything that would land
outside it - other absolute paths, ``..`` escapes, and symlinks (at any depth) whose
target is outside - because the workspace boundary is what lets the daemon run file tools
without asking the user each time. The check resolves symlinks, so the returned path is the
real location that will be touched.

Inside the workspace, the protected paths (`soulflow.security.protected`: `runtime/`, `.env*`,
the vault key and the vault) are refused too, both as written and after symlinks are followed,
and by inode so a hard link to the key is refused like the key. These refusals are plain
`ToolError`s, never approvable: no user decision should hand the vault key to a model.

"Safe write paths" are the directories the agent maintains as part of normal operation
(memory, skills, scratch space...). Writes there run without approval; anything else in the
workspace (config, code, the user's documents) needs the user's approval first.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from soulflow.agent.tools.base import ToolContext, ToolError
from soulflow.security.protected import ChatScope, ProtectedPaths, protected_paths

SAFE_WRITE_DIRS: tuple[str, ...] = (
    "memory",
    "skills",
    "agents",
    "templates",
    "runtime/inbound-files",
    "scratch",
)
"""Workspace-relative directories where the agent may write without approval."""


def guard_for(ctx: ToolContext) -> ProtectedPaths:
    """The protected paths as seen by this call: its chat's attachments are open to it."""
    key_file = ctx.vault.key_path if ctx.vault is not None else None
    return protected_paths(_root(ctx.workspace), key_file=key_file,
                           chat=ChatScope(ctx.chat.provider, ctx.chat.chat_id))


def resolve_in_workspace(workspace: Path, path_str: str, *, must_exist: bool = False,
                         guard: ProtectedPaths | None = None, listing: bool = False) -> Path:
    """The real path ``path_str`` names inside ``workspace``, or a `ToolError` saying why not.

    ``must_exist`` turns a missing target into a clear "not found" error. ``guard`` is the
    protected-path rule (default: the workspace's, with no chat's attachments open);
    ``listing`` applies its stricter rule for listing a directory.
    """
    root = _root(workspace)
    relative = _check_relative(_inside_absolute(workspace, root, path_str))
    guard = guard if guard is not None else protected_paths(root)
    _refuse_protected(guard.check_lexical(relative), path_str)
    candidate = root / relative
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops raise RuntimeError on 3.11
        raise ToolError(f"cannot resolve path '{path_str}': {exc}") from exc
    if not resolved.is_relative_to(root):
        raise ToolError(
            f"'{path_str}' goes through a symlink that points outside the workspace; "
            "only files inside the workspace can be used"
        )
    _refuse_protected(guard.check(resolved, listing=listing), path_str)
    if must_exist and not resolved.exists():
        raise ToolError(f"not found: '{path_str}' does not exist in the workspace")
    return resolved


def _refuse_protected(reason: str | None, path_str: str) -> None:
    if reason is not None:
        raise ToolError(f"'{path_str}' is protected and file tools cannot use it: {reason}")


def relative_to_workspace(workspace: Path, path: Path) -> str:
    """How to show ``path`` (already resolved) to the model: workspace-relative, POSIX style."""
    rel = path.relative_to(_root(workspace)).as_posix()
    return rel or "."


def is_safe_write_path(workspace: Path, path: Path) -> bool:
    """True if resolved ``path`` lies strictly inside one of `SAFE_WRITE_DIRS`."""
    root = _root(workspace)
    try:
        rel = PurePosixPath(path.relative_to(root).as_posix())
    except ValueError:
        return False
    for safe in SAFE_WRITE_DIRS:
        safe_path = PurePosixPath(safe)
        if rel != safe_path and rel.is_relative_to(safe_path):
            return True
    return False


def write_approval_reason(workspace: Path, path_str: str,
                          guard: ProtectedPaths | None = None) -> str | None:
    """Why writing to ``path_str`` needs approval, or None for a safe path.

    Raises `ToolError` for paths outside the workspace or protected: those are refused, not
    approvable.
    """
    target = resolve_in_workspace(workspace, path_str, guard=guard)
    if is_safe_write_path(workspace, target):
        return None
    shown = relative_to_workspace(workspace, target)
    if target.is_file():
        return f"overwrites an existing file outside safe paths ({shown})"
    return f"writes outside safe paths ({shown})"


def safe_write_dirs_hint() -> str:
    """The safe directories as the model should read them, e.g. ``memory/, skills/``."""
    return ", ".join(f"{d}/" for d in SAFE_WRITE_DIRS)


def _root(workspace: Path) -> Path:
    try:
        return Path(workspace).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ToolError(f"the workspace directory is not available: {exc}") from exc


def _inside_absolute(workspace: Path, root: Path, path_str: str) -> str:
    """An absolute path that names a place inside the workspace, made relative.

    Channels tell the model where an attachment was saved with an absolute path
    (``[attachment a.pdf saved at /srv/ws/runtime/inbound-files/...]``); accepting exactly
    those spellings lets it open the file. The check is lexical (after collapsing ``.`` and
    ``..``): ``/proc/self/root/...`` or ``/srv/ws/../other`` is not inside and stays refused
    as an absolute path; symlinks are judged afterwards like any relative path.
    """
    if not isinstance(path_str, str) or not path_str.startswith("/"):
        return path_str
    normal = PurePosixPath(os.path.normpath(path_str))
    for base in (root, Path(os.path.abspath(workspace))):
        try:
            inside = normal.relative_to(PurePosixPath(base.as_posix()))
        except ValueError:
            continue
        return inside.as_posix() or "."
    return path_str


def _check_relative(path_str: str) -> PurePosixPath:
    """Lexical checks: non-empty, relative, and not climbing above the workspace with ``..``."""
    if not isinstance(path_str, str) or not path_str.strip():
        raise ToolError("path is empty; give a path relative to the workspace, e.g. 'notes.md'")
    if "\x00" in path_str:
        raise ToolError("path contains a NUL character")
    if path_str.startswith("~"):
        raise ToolError(
            f"'{path_str}' uses '~'; give a path relative to the workspace instead"
        )
    path = PurePosixPath(path_str)
    if path.is_absolute():
        raise ToolError(
            f"absolute paths are not allowed ('{path_str}'); give a path relative to the "
            "workspace, e.g. 'notes/todo.md'"
        )
    depth = 0
    for part in path.parts:
        depth = depth - 1 if part == ".." else depth + (part != ".")
        if depth < 0:
            raise ToolError(
                f"'{path_str}' points outside the workspace ('..' climbs above it); "
                "only files inside the workspace can be used"
            )
    return path
