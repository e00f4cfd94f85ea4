"""Where the file tools may go: a model's path, checked and judged against the trust zones.

Every path a model gives is relative to the workspace root (or absolute but lexically inside
it, as channels name saved attachments). `tool_path` normalises it lexically - ``a/../b`` is
``b``, ``..`` above the root, ``~`` and other absolute paths are refused - and judges it
with `soulflow.security.protected.ProtectedPaths.judge` for the run's own chat zone
(`zone_for(ctx.chat)`):

* the run's own folder ``chats/<zone>/``: read and written without asking;
* the operator zone (templates, skills, agent roles, global memory, code - everything not
  under ``chats/`` or ``runtime/``): read; written only with an approval an admin or the local
  operator gives (`write_approval` asks an admins-only `ApprovalNeed`, and the tool checks
  ``ctx.approved`` again before it writes);
* ``runtime/``, ``chats/`` itself, another chat's folder, ``.env*``, the key and the vault:
  refused with a `ToolError`, never offered for approval.

A lexical judgement is only sound when the path opened is the path judged: the tools open
through `soulflow.storage.beneath.Beneath` (`beneath_for`), which follows no symbolic link in
any component and checks what it opened, so swapping a directory for a link between the
check and the open reaches nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from soulflow.agent.tools.base import ApprovalNeed, ToolContext, ToolError
from soulflow.security.protected import Access, ProtectedPaths, protected_paths
from soulflow.security.zones import MCP_CONFIG_FILE, ChatZone, zone_for
from soulflow.storage.beneath import Beneath

__all__ = [
    "ToolPath",
    "beneath_for",
    "guard_for",
    "own_zone",
    "require_writable",
    "resolve_in_workspace",
    "tool_path",
    "workspace_root",
    "write_approval",
    "zone_hint",
]


@dataclass(frozen=True, slots=True)
class ToolPath:
    """A model's path after the checks: ``rel`` is normalised and workspace-relative (the root
    is ``PurePosixPath()``), ``given`` is how the model wrote it, ``access`` its zone rule."""

    rel: PurePosixPath
    given: str
    access: Access

    @property
    def shown(self) -> str:
        """How to name the path back to the model: workspace-relative, POSIX style."""
        return self.rel.as_posix() if self.rel.parts else "."


def guard_for(ctx: ToolContext) -> ProtectedPaths:
    """The protected paths as this call sees them (the key wherever the vault keeps it)."""
    key_file = ctx.vault.key_path if ctx.vault is not None else None
    return protected_paths(workspace_root(ctx.workspace), key_file=key_file)


def beneath_for(ctx: ToolContext) -> Beneath:
    """The call's workspace, opened without following links (see the module docstring)."""
    return Beneath(workspace_root(ctx.workspace))



def own_zone(ctx: ToolContext) -> ChatZone:
    """The run's own chat zone (its folder ``chats/<zone>/``)."""
    return zone_for(ctx.chat)


def zone_hint(ctx: ToolContext) -> str:
    """"chats/<zone>/": the run's own folder, as error messages name it."""
    return own_zone(ctx).rel.as_posix() + "/"


def tool_path(ctx: ToolContext, path_str: str, guard: ProtectedPaths | None = None) -> ToolPath:
    """``path_str`` checked and judged for this call's chat; a `ToolError` saying why not."""
    root = workspace_root(ctx.workspace)
    rel = _normalised(_inside_absolute(ctx.workspace, root, path_str))
    guard = guard if guard is not None else guard_for(ctx)
    rule = guard.judge(rel, own_zone(ctx))
    if rule.access is Access.REFUSED:
        raise ToolError(f"'{path_str}' is protected and file tools cannot use it: "
                        f"{rule.reason}")
    return ToolPath(rel, path_str, rule.access)


def write_approval(ctx: ToolContext, path_str: str) -> ApprovalNeed | None:
    """What writing ``path_str`` needs: nothing in the run's own folder, an admins-only
    approval in the operator zone; a `ToolError` where writing is refused outright."""
    target = tool_path(ctx, path_str)
    _refuse_folders(ctx, target)
    if target.access is Access.OWN:
        return None
    if len(target.rel.parts) == 1 and target.rel.parts[0].casefold() == MCP_CONFIG_FILE:
        return ApprovalNeed(f"it changes {MCP_CONFIG_FILE}, which chooses the programs and "
                            "servers the daemon runs as MCP tools", admins_only=True)
    return ApprovalNeed(f"it changes the operator's files ({target.shown})", admins_only=True)


def require_writable(ctx: ToolContext, target: ToolPath) -> None:
    """The write rule again where the write happens (the registry skips `needs_approval` for
    an approved call, and a tool may be called without the registry)."""
    _refuse_folders(ctx, target)
    if target.access is Access.OWN or ctx.approved:
        return
    raise ToolError(f"'{target.given}' is in the operator's files: writing it needs an "
                    f"admin's approval; this chat's own folder is {zone_hint(ctx)}")


def _refuse_folders(ctx: ToolContext, target: ToolPath) -> None:
    """The workspace root and the chat's own folder are directories a write may never turn
    into a file (a missing chat folder would otherwise be created as one)."""
    if not target.rel.parts:
        raise ToolError(f"'{target.given}' is the workspace root, a directory; give a file path")
    if target.rel == own_zone(ctx).rel:
        raise ToolError(f"'{target.given}' is this chat's folder, a directory; give a file "
                        "path inside it")


def workspace_root(workspace: Path) -> Path:
    """The workspace directory, resolved once (it may itself be reached through a link)."""
    try:
        return Path(workspace).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ToolError(f"the workspace directory is not available: {exc}") from exc


def resolve_in_workspace(workspace: Path, path_str: str) -> Path:
    """The absolute path ``path_str`` names in the workspace, after the lexical checks and the
    zone rules for nobody's chat (every chat folder refused): for handing a directory to
    another process (``exec``'s working directory). File tools open through `Beneath`."""
    root = workspace_root(workspace)
    rel = _normalised(_inside_absolute(workspace, root, path_str))
    rule = protected_paths(root).judge(rel, None)
    if rule.access is Access.REFUSED:
        raise ToolError(f"'{path_str}' is protected and file tools cannot use it: "
                        f"{rule.reason}")
    return root.joinpath(*rel.parts)


def _inside_absolute(workspace: Path, root: Path, path_str: str) -> str:
    """An absolute path that names a place inside the workspace, made relative.

    Channels tell the model where an attachment was saved with an absolute path
    (``[attachment a.pdf saved at /srv/ws/chats/<zone>/files/...]``); accepting exactly
    those spellings lets it open the file. The check is lexical (after collapsing ``.`` and
    ``..``): ``/proc/self/root/...`` or ``/srv/ws/../other`` is not inside and stays refused
    as an absolute path.
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


def _normalised(path_str: str) -> PurePosixPath:
    """Lexical checks, then the path with ``.`` and ``a/..`` collapsed: non-empty, relative,
    no NUL, and not climbing above the workspace with ``..``. Collapsing before opening is
    right only because no component may be a link (`Beneath` refuses them)."""
    if not isinstance(path_str, str) or not path_str.strip():
        raise ToolError("path is empty; give a path relative to the workspace, e.g. 'notes.md'")
    if "\x00" in path_str:
        raise ToolError("path contains a NUL character")
    if path_str.startswith("~"):
        raise ToolError(
            f"'{path_str}' uses '~'; give a path relative to the workspace instead"
        )
    if PurePosixPath(path_str).is_absolute():
        raise ToolError(
            f"absolute paths are not allowed ('{path_str}'); give a path relative to the "
            "workspace, e.g. 'notes/todo.md'"
        )
    normal = PurePosixPath(os.path.normpath(path_str))
    if normal.parts and normal.parts[0] == "..":
        raise ToolError(
            f"'{path_str}' points outside the workspace ('..' climbs above it); "
            "only files inside the workspace can be used"
        )
    return PurePosixPath(*[p for p in normal.parts if p != "."])
