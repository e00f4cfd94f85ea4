"""File tools: read, write, edit and list files inside the workspace.

All paths go through `resolve_in_workspace`, so nothing outside the workspace is ever read or
written, and nothing protected inside it (`runtime/`, `.env*`, the vault key; see
`soulflow.security.protected`) either: those are refused, and `list_dir` does not show them.
Writes and edits outside the safe directories (memory/, skills/, scratch/...) need the user's
approval. Disk work runs in a thread so a slow disk never stalls the event loop, and
writes are atomic so a crash leaves the old or the new file, never half of one.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from pathlib import Path
from typing import Any

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.workspace import (
    guard_for,
    relative_to_workspace,
    resolve_in_workspace,
    safe_write_dirs_hint,
    write_approval_reason,
)
from soulflow.security.protected import ProtectedPaths
from soulflow.storage.atomic import write_bytes_atomic

MAX_READ_BYTES = 1024 * 1024
MAX_LIST_ENTRIES = 500
_BINARY_SNIFF_BYTES = 8192

_PATH = {"type": "string", "description": "Path relative to the workspace."}


class ReadFileTool(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file from the workspace (max 1 MB). Use offset/limit to read a "
        "range of lines; line numbers start at 1."
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
        path = resolve_in_workspace(ctx.workspace, params["path"], must_exist=True,
                                    guard=guard)
        text = await asyncio.to_thread(_read_text, path, params["path"], guard)
        offset, limit = params.get("offset"), params.get("limit")
        if offset is None and limit is None:
            return text
        return _line_window(text, offset or 1, limit)


class WriteFileTool(Tool):
    name = "write_file"
    description = (
        "Create or replace a text file in the workspace; parent directories are created. "
        f"Writes outside {safe_write_dirs_hint()} need the user's approval."
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

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return write_approval_reason(ctx.workspace, params["path"], guard_for(ctx))

    async def run(self, params: Params, ctx: ToolContext) -> str:
        path = resolve_in_workspace(ctx.workspace, params["path"], guard=guard_for(ctx))
        if path.is_dir():
            raise ToolError(f"'{params['path']}' is a directory; give a file path")
        existed = path.exists()
        data = params["content"].encode("utf-8")
        await asyncio.to_thread(_write_atomic, path, data)
        verb = "replaced" if existed else "created"
        return f"{verb} {relative_to_workspace(ctx.workspace, path)} ({len(data)} bytes)"


class EditFileTool(Tool):
    name = "edit_file"
    description = (
        "Replace exact text in a workspace file. old_text must match exactly (including "
        "whitespace) and exactly once, unless count says how many occurrences to replace. "
        f"Edits outside {safe_write_dirs_hint()} need the user's approval."
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

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return write_approval_reason(ctx.workspace, params["path"], guard_for(ctx))

    async def run(self, params: Params, ctx: ToolContext) -> str:
        guard = guard_for(ctx)
        path = resolve_in_workspace(ctx.workspace, params["path"], must_exist=True,
                                    guard=guard)
        text = await asyncio.to_thread(_read_text, path, params["path"], guard)
        old, new = params["old_text"], params["new_text"]
        expected = params.get("count", 1)
        found = text.count(old)
        if found == 0:
            raise ToolError(
                f"old_text was not found in '{params['path']}'; it must match exactly, "
                "including whitespace and indentation (read the file first)"
            )
        if found != expected:
            raise ToolError(
                f"old_text matches {found} places in '{params['path']}' but count is "
                f"{expected}; include more surrounding text to make it unique, or pass "
                f"count={found} to replace every occurrence"
            )
        updated = text.replace(old, new)
        await asyncio.to_thread(_write_atomic, path, updated.encode("utf-8"))
        shown = relative_to_workspace(ctx.workspace, path)
        return f"edited {shown}: replaced {found} occurrence(s)"


class ListDirTool(Tool):
    name = "list_dir"
    description = (
        "List a workspace directory (default: the workspace root). Directories end with '/'. "
        f"At most {MAX_LIST_ENTRIES} entries; recursive lists the whole tree."
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
        path_str = params.get("path", ".")
        guard = guard_for(ctx)
        path = resolve_in_workspace(ctx.workspace, path_str, must_exist=True, guard=guard,
                                    listing=True)
        if not path.is_dir():
            raise ToolError(f"'{path_str}' is a file, not a directory; use read_file")
        recursive = bool(params.get("recursive", False))
        entries, more = await asyncio.to_thread(_list_entries, path, recursive, guard)
        if not entries:
            return "(empty directory)"
        lines = "\n".join(entries)
        if more:
            lines += f"\n[listing stopped at {MAX_LIST_ENTRIES} entries; list a subdirectory]"
        return lines


# ----------------------------------------------------------------- helpers (run in threads)


def _read_text(path: Path, shown: str, guard: ProtectedPaths) -> str:
    """The file as text; clear errors for directories, big files and binary content.

    ``path`` is already resolved and checked; it is opened without following a final symlink
    and checked again on the open descriptor, so a swap between the check and the read (a
    concurrent command replacing the file with a link to the key) reads nothing.
    """
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory; use list_dir")
    if not path.is_file():
        raise ToolError(f"'{shown}' is not a regular file (device, socket or pipe)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ToolError(f"could not open '{shown}': {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        reason = guard.check_opened(st)
        if reason is not None:
            raise ToolError(f"'{shown}' is protected and file tools cannot use it: {reason}")
        size = st.st_size
        if size > MAX_READ_BYTES:
            raise ToolError(
                f"'{shown}' is {size / 1024 / 1024:.1f} MB, over the 1 MB read limit; use the "
                "exec tool with head, tail, sed -n or grep to look at parts of it"
            )
        data = handle.read(MAX_READ_BYTES + 1)
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ToolError(f"'{shown}' is a binary file ({_kind(path, size)}); cannot show it as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"'{shown}' is not UTF-8 text ({_kind(path, size)}; invalid byte at {exc.start})"
        ) from exc


def _kind(path: Path, size: int) -> str:
    mime, _ = mimetypes.guess_type(path.name)
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


def _write_atomic(path: Path, data: bytes) -> None:
    """Atomic replace that keeps an existing file's permission bits (e.g. executable)."""
    mode = 0o644
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        pass
    try:
        write_bytes_atomic(path, data, mode=mode)
    except OSError as exc:
        raise ToolError(f"could not write '{path.name}': {exc.strerror or exc}") from exc


def _list_entries(path: Path, recursive: bool,
                  guard: ProtectedPaths) -> tuple[list[str], bool]:
    """Up to `MAX_LIST_ENTRIES` sorted entries relative to ``path``; True if more exist.

    Protected entries (and links to them) are left out, as if they did not exist: showing
    ``.env`` or ``runtime/`` would only invite the model to ask for them.
    """
    guard = guard.pinned()  # the key inodes once, not once per entry
    entries: list[str] = []
    if not recursive:
        for child in sorted(path.iterdir(), key=lambda p: p.name):
            if not guard.visible(child):
                continue
            if len(entries) >= MAX_LIST_ENTRIES:
                return entries, True
            entries.append(child.name + ("/" if child.is_dir() else ""))
        return entries, False
    for current, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if guard.visible(Path(current) / d))
        files = [f for f in files if guard.visible(Path(current) / f)]
        base = Path(current).relative_to(path)
        names: list[tuple[str, Any]] = [(d, True) for d in dirs] + [(f, False) for f in files]
        for name, is_dir in sorted(names):
            if len(entries) >= MAX_LIST_ENTRIES:
                return entries, True
            entries.append((base / name).as_posix() + ("/" if is_dir else ""))
    return entries, False
