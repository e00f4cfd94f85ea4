"""File tools: read, write, edit and list files inside the workspace, by the trust-zone rules.

Every path goes through `tool_path` (soulflow/agent/tools/workspace.py), which judges it for
the run's chat: its own folder ``chats/<zone>/`` is free to read and write; the operator's
files (templates, skills, global memory, code...) are read freely and written only after an
admin or the local operator approved the call; ``runtime/``, ``chats/`` itself, another
chat's folder, ``.env*`` and the vault key are refused, and `list_dir` does not show them.

Every open goes through `soulflow.storage.beneath.Beneath`: no symbolic link is followed in
any component (a link is refused with a sentence saying so), only regular files are read,
and the key/vault inode rule is checked on the ``fstat`` of the descriptor actually opened.
So the path judged is the file touched: swapping a directory for a link between the check
and the open gains nothing. Writes replace the file atomically through its parent
directory's descriptor (a crash leaves the old or the new file, never half of one) and keep
an existing file's permission bits. Disk work runs in a thread so a slow disk never stalls
the event loop.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from soulflow.agent.tools.base import ApprovalNeed, Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.workspace import (
    ToolPath,
    beneath_for,
    guard_for,
    own_zone,
    require_writable,
    tool_path,
    write_approval,
)
from soulflow.security.protected import Access, ProtectedPaths
from soulflow.security.quota import QuotaExceeded, ZoneQuotas
from soulflow.security.zones import ChatZone
from soulflow.storage.beneath import Beneath, DirEntry, RefusedPath

MAX_READ_BYTES = 1024 * 1024
MAX_LIST_ENTRIES = 500
_BINARY_SNIFF_BYTES = 8192
_NEW_FILE_MODE = 0o644
LINK_MARK = "@"

_PATH = {"type": "string", "description": "Path relative to the workspace root."}
_WHERE = (
    "Paths are relative to the workspace root. This chat's own folder is chats/<this chat>/ "
    "(your instructions name it)"
)


class ReadFileTool(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file from the workspace (max 1 MB). Use offset/limit to read a "
        f"range of lines; line numbers start at 1. {_WHERE}; the operator's files (templates/, "
        "skills/, memory/...) can be read too. Other chats' folders, runtime/ and .env files "
        "cannot be read, and symbolic links are not followed."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Maximum lines to read."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, params: Params, ctx: ToolContext) -> str:
        guard = guard_for(ctx)
        target = tool_path(ctx, params["path"], guard)
        text = await asyncio.to_thread(_read_text, beneath_for(ctx), target, guard)
        offset, limit = params.get("offset"), params.get("limit")
        if offset is None and limit is None:
            return text
        return _line_window(text, offset or 1, limit)


_WRITE_RULES = (
    f"{_WHERE}: write your files there, no approval needed. Changing the operator's files "
    "(anything outside chats/, e.g. templates/, skills/, agents/, memory/) needs an admin's "
    "approval; other chats' folders, runtime/ and .env files are refused."
)


class WriteFileTool(Tool):
    name = "write_file"
    description = (
        "Create or replace a text file in the workspace; parent directories are created. "
        + _WRITE_RULES
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": _PATH,
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def __init__(self, quotas: ZoneQuotas | None = None) -> None:
        self.quotas = quotas

    def needs_approval(self, params: Params, ctx: ToolContext) -> ApprovalNeed | None:
        return write_approval(ctx, params["path"])

    async def run(self, params: Params, ctx: ToolContext) -> str:
        guard = guard_for(ctx)
        target = tool_path(ctx, params["path"], guard)
        require_writable(ctx, target)
        data = params["content"].encode("utf-8")
        quota = _ZoneBudget(self.quotas, ctx, target)
        existed = await asyncio.to_thread(_write_file, beneath_for(ctx), target, guard, data,
                                          quota)
        verb = "replaced" if existed else "created"
        return f"{verb} {target.shown} ({len(data)} bytes)"


class EditFileTool(Tool):
    name = "edit_file"
    description = (
        "Replace exact text in a workspace file. old_text must match exactly (including "
        "whitespace) and exactly once, unless count says how many occurrences to replace. "
        + _WRITE_RULES
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": _PATH,
            "old_text": {"type": "string", "minLength": 1},
            "new_text": {"type": "string"},
            "count": {
                "type": "integer",
                "minimum": 1,
                "description": "How many occurrences to replace (all must exist). Default 1.",
            },
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def __init__(self, quotas: ZoneQuotas | None = None) -> None:
        self.quotas = quotas

    def needs_approval(self, params: Params, ctx: ToolContext) -> ApprovalNeed | None:
        return write_approval(ctx, params["path"])

    async def run(self, params: Params, ctx: ToolContext) -> str:
        guard = guard_for(ctx)
        target = tool_path(ctx, params["path"], guard)
        require_writable(ctx, target)
        beneath = beneath_for(ctx)
        text, mode = await asyncio.to_thread(_read_for_edit, beneath, target, guard)
        old, new = params["old_text"], params["new_text"]
        expected = params.get("count", 1)
        found = text.count(old)
        if found == 0:
            raise ToolError(
                f"old_text was not found in '{target.given}'; it must match exactly, "
                "including whitespace and indentation (read the file first)"
            )
        if found != expected:
            raise ToolError(
                f"old_text matches {found} places in '{target.given}' but count is "
                f"{expected}; include more surrounding text to make it unique, or pass "
                f"count={found} to replace every occurrence"
            )
        updated = text.replace(old, new).encode("utf-8")
        budget = _ZoneBudget(self.quotas, ctx, target)
        await asyncio.to_thread(_replace_within, beneath, target, updated, mode, budget,
                                len(text.encode("utf-8")))
        return f"edited {target.shown}: replaced {found} occurrence(s)"


class ListDirTool(Tool):
    name = "list_dir"
    description = (
        "List a workspace directory (default: the workspace root). Directories end with '/', "
        f"symbolic links with '{LINK_MARK}' (never followed). At most {MAX_LIST_ENTRIES} "
        f"entries; recursive lists the whole tree. {_WHERE}; other chats' folders, runtime/ "
        "and .env files are not listed."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {**_PATH, "default": "."},
            "recursive": {"type": "boolean", "default": False},
        },
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, params: Params, ctx: ToolContext) -> str:
        guard = guard_for(ctx)
        target = tool_path(ctx, params.get("path", "."), guard)
        recursive = bool(params.get("recursive", False))
        listing = await asyncio.to_thread(_list_entries, beneath_for(ctx), target, guard,
                                          own_zone(ctx), recursive)
        return listing


# ----------------------------------------------------------------- helpers (run in threads)


def _open_regular(beneath: Beneath, target: ToolPath, guard: ProtectedPaths,
                  ) -> tuple[int, os.stat_result]:
    """The file opened for reading, and its ``fstat``: links refused in any component, only a
    regular file, and the inode rule checked on what was opened."""
    try:
        fd, st = beneath.open_regular(target.rel)
    except FileNotFoundError:
        raise ToolError(f"not found: '{target.given}' does not exist in the workspace") \
            from None
    except RefusedPath as exc:
        raise ToolError(_why_unopenable(beneath, target, exc, reading=True)) from None
    except OSError as exc:
        raise ToolError(f"could not open '{target.given}': {exc.strerror or exc}") from None
    reason = guard.check_opened(st)
    if reason is not None:
        os.close(fd)
        raise ToolError(f"'{target.given}' is protected and file tools cannot use it: {reason}")
    return fd, st


def _read_text(beneath: Beneath, target: ToolPath, guard: ProtectedPaths) -> str:
    """The file as text; clear errors for directories, links, big files and binary content."""
    fd, st = _open_regular(beneath, target, guard)
    return _text_of(fd, st, target)


def _read_for_edit(beneath: Beneath, target: ToolPath,
                   guard: ProtectedPaths) -> tuple[str, int]:
    """The file's text and permission bits (kept when it is written back)."""
    fd, st = _open_regular(beneath, target, guard)
    return _text_of(fd, st, target), stat.S_IMODE(st.st_mode)


def _text_of(fd: int, st: os.stat_result, target: ToolPath) -> str:
    """The opened file's content as UTF-8 text (the descriptor is closed)."""
    with os.fdopen(fd, "rb") as handle:
        size = st.st_size
        if size > MAX_READ_BYTES:
            raise ToolError(
                f"'{target.given}' is {size / 1024 / 1024:.1f} MB, over the 1 MB read limit; "
                "use the exec tool with head, tail, sed -n or grep to look at parts of it"
            )
        data = handle.read(MAX_READ_BYTES + 1)
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ToolError(f"'{target.given}' is a binary file ({_kind(target.rel, size)}); "
                        "cannot show it as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"'{target.given}' is not UTF-8 text ({_kind(target.rel, size)}; invalid byte at "
            f"{exc.start})"
        ) from exc


@dataclass(frozen=True, slots=True)
class _ZoneBudget:
    """The chat folder's disk quota as a write in it sees it (nothing to check for a write
    elsewhere: the operator's files are written only with an admin's approval)."""

    quotas: ZoneQuotas | None
    ctx: ToolContext
    target: ToolPath

    def check(self, beneath: Beneath, added_bytes: int, new_file: bool) -> None:
        """Refuse (`ToolError`) a write that would take the folder over its quota."""
        if self.quotas is None or self.target.access is not Access.OWN:
            return
        added_files = int(new_file) + _missing_parents(beneath, self.target.rel)
        try:
            self.quotas.check_write(beneath.root, own_zone(self.ctx), added_bytes, added_files)
        except QuotaExceeded as exc:
            raise ToolError(f"not written: {exc}") from None


def _missing_parents(beneath: Beneath, rel: PurePosixPath) -> int:
    """How many folders a write to ``rel`` would create."""
    missing = 0
    for parent in rel.parents:
        if not parent.parts or beneath.is_dir(parent):
            break
        missing += 1
    return missing


def _replace_within(beneath: Beneath, target: ToolPath, data: bytes, mode: int,
                    budget: _ZoneBudget, old_size: int) -> None:
    budget.check(beneath, len(data) - old_size, new_file=False)
    _replace(beneath, target, data, mode)


def _write_file(beneath: Beneath, target: ToolPath, guard: ProtectedPaths,
                data: bytes, budget: _ZoneBudget) -> bool:
    """Create or replace the file; True if one was there. An existing file must be a regular
    file that is not a secret under another name; its permission bits are kept."""
    try:
        st = beneath.stat(target.rel) if target.rel.parts else None
    except RefusedPath as exc:
        raise ToolError(_why_unopenable(beneath, target, exc, reading=False)) from None
    except OSError as exc:
        raise ToolError(f"could not write '{target.given}': {exc.strerror or exc}") from None
    if not target.rel.parts or (st is not None and stat.S_ISDIR(st.st_mode)):
        raise ToolError(f"'{target.given}' is a directory; give a file path")
    mode = _NEW_FILE_MODE
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ToolError(_link_sentence(target))
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"'{target.given}' is not a regular file (device, socket or pipe)")
        reason = guard.check_opened(st)
        if reason is not None:
            raise ToolError(f"'{target.given}' is protected and file tools cannot use it: "
                            f"{reason}")
        mode = stat.S_IMODE(st.st_mode)
    budget.check(beneath, len(data) - (st.st_size if st is not None else 0),
                 new_file=st is None)
    _replace(beneath, target, data, mode)
    return st is not None


def _replace(beneath: Beneath, target: ToolPath, data: bytes, mode: int) -> None:
    """Atomic replace through the parent directory's descriptor, links refused on the way."""
    try:
        beneath.write_atomic(target.rel, data, mode=mode)
    except RefusedPath as exc:
        raise ToolError(_why_unopenable(beneath, target, exc, reading=False)) from None
    except OSError as exc:
        raise ToolError(f"could not write '{target.given}': {exc.strerror or exc}") from None


def _why_unopenable(beneath: Beneath, target: ToolPath, exc: RefusedPath, *,
                    reading: bool) -> str:
    """One sentence for a refused open: what is at the path (looked at without following
    anything), since `Beneath` only knows that it would not open it."""
    if not target.rel.parts:
        return f"'{target.given}' is the workspace root, a directory; use list_dir"
    try:
        st = beneath.stat(target.rel)
    except OSError:
        return _link_sentence(target)  # a link (or a file) where a directory should be
    if st is None:
        return f"could not open '{target.given}': {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return _link_sentence(target)
    if stat.S_ISDIR(st.st_mode):
        return (f"'{target.given}' is a directory; use list_dir" if reading
                else f"'{target.given}' is a directory; give a file path")
    if not stat.S_ISREG(st.st_mode):
        return f"'{target.given}' is not a regular file (device, socket or pipe)"
    return f"could not open '{target.given}': {exc.strerror or exc}"


def _link_sentence(target: ToolPath) -> str:
    return (f"'{target.given}' is or passes through a symbolic link, and file tools never "
            "follow links; use the path of the file itself")


def _kind(rel: PurePosixPath, size: int) -> str:
    mime, _ = mimetypes.guess_type(rel.name)
    return f"{mime or 'unknown type'}, {size} bytes"


def _line_window(text: str, offset: int, limit: int | None) -> str:
    lines = text.splitlines(keepends=True)
    total = len(lines)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of the file ({total} lines)")
    end = total if limit is None else min(total, offset - 1 + limit)
    body = "".join(lines[offset - 1 : end])
    if not body.endswith("\n"):
        body += "\n"
    note = f"[lines {offset}-{end} of {total}"
    note += f"; continue with offset={end + 1}]" if end < total else "]"
    return body + note


def _list_entries(beneath: Beneath, target: ToolPath, guard: ProtectedPaths,
                  zone: ChatZone, recursive: bool) -> str:
    """The listing as the model reads it (see `ListDirTool`)."""
    guard = guard.pinned()  # the key inodes once, not once per entry
    try:
        top = beneath.list_dir(target.rel)
    except FileNotFoundError:
        raise ToolError(f"not found: '{target.given}' does not exist in the workspace") \
            from None
    except RefusedPath as exc:
        raise ToolError(_why_unlistable(beneath, target, exc)) from None
    except OSError as exc:
        raise ToolError(f"could not list '{target.given}': {exc.strerror or exc}") from None
    lines: list[str] = []
    links = False
    pending: list[tuple[PurePosixPath, list[DirEntry]]] = [(target.rel, top)]
    while pending:
        where, listed = pending.pop()
        shown = [e for e in listed if _visible(guard, zone, where / e.name, e)]
        for entry in shown:
            if len(lines) >= MAX_LIST_ENTRIES:
                return _listing(lines, links, more=True)
            name = (where / entry.name).relative_to(target.rel).as_posix()
            links = links or entry.kind == "link"
            lines.append(name + {"dir": "/", "link": LINK_MARK}.get(entry.kind, ""))
        if recursive:
            subdirs = [where / e.name for e in shown if e.kind == "dir"]
            for sub in reversed(subdirs):
                try:
                    pending.append((sub, beneath.list_dir(sub)))
                except OSError:
                    continue  # vanished, or swapped for a link, since it was listed
    return _listing(lines, links, more=False)


def _visible(guard: ProtectedPaths, zone: ChatZone, rel: PurePosixPath, entry: DirEntry) -> bool:
    """Whether a listing shows the entry: refused paths are left out as if they did not
    exist (showing ``.env`` or another chat's folder would only invite the model to ask for
    them), except ``chats/``, which leads to this chat's own folder; so is a file that is a
    secret under another name."""
    if guard.judge(rel, zone).access is Access.REFUSED:
        return zone.rel.is_relative_to(rel)
    return not (entry.kind == "file" and entry.st is not None
                and guard.check_opened(entry.st) is not None)


def _listing(lines: list[str], links: bool, *, more: bool) -> str:
    if not lines:
        return "(empty directory)"
    text = "\n".join(lines)
    if more:
        text += f"\n[listing stopped at {MAX_LIST_ENTRIES} entries; list a subdirectory]"
    if links:
        text += (f"\n[names ending in '{LINK_MARK}' are symbolic links; file tools do not "
                 "follow them]")
    return text


def _why_unlistable(beneath: Beneath, target: ToolPath, exc: RefusedPath) -> str:
    try:
        st = beneath.stat(target.rel)
    except OSError:
        return _link_sentence(target)
    if st is not None and stat.S_ISREG(st.st_mode):
        return f"'{target.given}' is a file, not a directory; use read_file"
    if st is not None and stat.S_ISLNK(st.st_mode):
        return _link_sentence(target)
    return f"could not list '{target.given}': {exc.strerror or exc}"
