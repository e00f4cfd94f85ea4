"""Workspace containment and the file tools (read/write/edit/list), through the registry.

The zone rules themselves (own folder, operator files, other chats, runtime/) are proven in
tests/security/test_file_zones.py; this file covers the tools' everyday behaviour."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

import pytest

from soulflow.agent.tools import build_default_registry, files
from soulflow.agent.tools.base import ToolContext, ToolError
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.workspace import resolve_in_workspace, tool_path
from soulflow.security.protected import Access
from tests.tools.conftest import MakeCtx

OWN = "chats/local-c1"  # the zone of the fixtures' chat (local:c1)


@pytest.fixture
def registry() -> ToolRegistry:
    return build_default_registry()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret.txt").write_text("outside secret")
    return target


# ----------------------------------------------------------------- tool_path


def test_paths_are_normalised_lexically(ctx: ToolContext) -> None:
    assert tool_path(ctx, "notes/a.md").rel == PurePosixPath("notes/a.md")
    assert tool_path(ctx, "notes/../b.md").rel == PurePosixPath("b.md")
    assert tool_path(ctx, "./notes//c.md").shown == "notes/c.md"
    assert tool_path(ctx, ".").shown == "."
    assert tool_path(ctx, f"{OWN}/x/../y.md").access is Access.OWN
    assert tool_path(ctx, "templates/t.md").access is Access.OPERATOR


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "absolute paths are not allowed"),
        ("../outside/secret.txt", "points outside the workspace"),
        ("a/../../outside", "points outside the workspace"),
        ("~/x", "uses '~'"),
        ("", "path is empty"),
        ("a\x00b", "NUL"),
    ],
)
def test_escapes_are_refused(ctx: ToolContext, outside: Path, path: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        tool_path(ctx, path)


async def test_symlinks_are_never_followed(registry: ToolRegistry, workspace: Path,
                                           outside: Path, make_ctx: MakeCtx) -> None:
    """A link anywhere on the path is refused with a sentence saying so: inside the
    workspace or out, to a file or a directory, approved or not."""
    own = workspace / OWN
    own.mkdir(parents=True)
    (own / "real").mkdir()
    (own / "real" / "x.txt").write_text("real")
    (own / "alias").symlink_to("real")
    (own / "link_file").symlink_to(outside / "secret.txt")
    (own / "link_dir").symlink_to(outside)
    (own / "dangling").symlink_to(outside / "not-yet")
    for path in ("alias/x.txt", "link_file", "link_dir/secret.txt", "dangling"):
        for approved in (False, True):
            result = await registry.execute("read_file", {"path": f"{OWN}/{path}"},
                                            make_ctx(approved=approved))
            assert result.status == "error" and "symbolic link" in result.output, path
            assert "outside secret" not in result.output
    for path in ("alias/new.txt", "link_dir/new.txt", "dangling", "link_file"):
        result = await registry.execute("write_file", {"path": f"{OWN}/{path}", "content": "x"},
                                        make_ctx(approved=True))
        assert result.status == "error" and "symbolic link" in result.output, path
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "outside secret"


# ----------------------------------------------------------------- read_file


async def test_read_file_whole_and_by_lines(registry: ToolRegistry, workspace: Path, ctx):
    (workspace / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    whole = await registry.execute("read_file", {"path": "a.txt"}, ctx)
    assert whole.output == "one\ntwo\nthree\nfour\n"
    part = await registry.execute("read_file", {"path": "a.txt", "offset": 2, "limit": 2}, ctx)
    assert part.output == "two\nthree\n[lines 2-3 of 4; continue with offset=4]"
    tail = await registry.execute("read_file", {"path": "a.txt", "offset": 4}, ctx)
    assert tail.output == "four\n[lines 4-4 of 4]"
    past = await registry.execute("read_file", {"path": "a.txt", "offset": 9}, ctx)
    assert "past the end of the file (4 lines)" in past.output


async def test_read_file_refusals(
    registry: ToolRegistry, workspace: Path, outside: Path, ctx: ToolContext, monkeypatch
) -> None:
    (workspace / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (workspace / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (workspace / "big.txt").write_text("x" * 100)
    (workspace / "dir").mkdir()
    (workspace / "escape").symlink_to(outside / "secret.txt")
    monkeypatch.setattr(files, "MAX_READ_BYTES", 50)

    async def read(path: str) -> str:
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error", path
        return result.output

    assert "binary file" in await read("blob.bin")
    assert "not UTF-8 text" in await read("latin.txt")
    assert "over the 1 MB read limit" in await read("big.txt")
    assert "is a directory" in await read("dir")
    assert "a directory; use list_dir" in await read(".")
    assert "not found" in await read("missing.txt")
    assert "absolute paths are not allowed" in await read("/etc/hostname")
    assert "points outside the workspace" in await read("../outside/secret.txt")
    assert "symbolic link" in await read("escape")


# ----------------------------------------------------------------- write_file


async def test_write_in_the_own_folder_needs_no_approval(
    registry: ToolRegistry, workspace: Path, ctx: ToolContext
) -> None:
    result = await registry.execute(
        "write_file", {"path": f"{OWN}/deep/notes.md", "content": "héllo"}, ctx
    )
    assert result.status == "ok"
    assert result.output == f"created {OWN}/deep/notes.md (6 bytes)"
    assert (workspace / OWN / "deep/notes.md").read_text() == "héllo"


async def test_write_to_the_operators_files_needs_an_admins_approval(
    registry: ToolRegistry, workspace: Path, make_ctx: MakeCtx
) -> None:
    params = {"path": "notes.md", "content": "new"}
    pending = await registry.execute("write_file", params, make_ctx())
    assert pending.status == "approval_required" and pending.admins_only
    assert pending.reason == "it changes the operator's files (notes.md)"
    assert not (workspace / "notes.md").exists()

    done = await registry.execute("write_file", params, make_ctx(approved=True))
    assert done.output == "created notes.md (3 bytes)"

    again = await registry.execute("write_file", params, make_ctx())
    assert again.reason == "it changes the operator's files (notes.md)" and again.admins_only


async def test_the_own_folder_is_never_written_as_a_file(
    registry: ToolRegistry, workspace: Path, ctx: ToolContext
) -> None:
    for path in (OWN, f"{OWN}/", f"{OWN}/x/.."):
        result = await registry.execute("write_file", {"path": path, "content": "x"}, ctx)
        assert result.status == "error" and "this chat's folder" in result.output, path
    assert not (workspace / "chats").exists()


async def test_write_keeps_permissions_and_refuses_escapes(
    registry: ToolRegistry, workspace: Path, outside: Path, make_ctx: MakeCtx
) -> None:
    script = workspace / OWN / "run.sh"
    script.parent.mkdir(parents=True)
    script.write_text("old")
    script.chmod(0o755)
    result = await registry.execute(
        "write_file", {"path": f"{OWN}/run.sh", "content": "echo hi"}, make_ctx()
    )
    assert result.output == f"replaced {OWN}/run.sh (7 bytes)"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    (workspace / OWN / "private.txt").write_text("old")
    (workspace / OWN / "private.txt").chmod(0o600)
    await registry.execute("write_file", {"path": f"{OWN}/private.txt", "content": "new"},
                           make_ctx())
    assert stat.S_IMODE((workspace / OWN / "private.txt").stat().st_mode) == 0o600

    (workspace / "memory").mkdir()
    (workspace / "memory" / "out").symlink_to(outside)
    for path in ("../outside/x.txt", "/tmp/x.txt", "memory/out/x.txt", ".", OWN,
                 "chats/local-c2"):
        refused = await registry.execute(
            "write_file", {"path": path, "content": "x"}, make_ctx(approved=True)
        )
        assert refused.status == "error", path  # refused outright, not offered for approval
    assert os.listdir(outside) == ["secret.txt"]


# ----------------------------------------------------------------- edit_file


async def test_edit_file(registry: ToolRegistry, workspace: Path, ctx: ToolContext) -> None:
    target = workspace / OWN / "todo.md"
    target.parent.mkdir(parents=True)
    target.write_text("- a\n- b\n- a\n")
    target.chmod(0o640)

    async def edit(**params: object) -> str:
        result = await registry.execute("edit_file", {"path": f"{OWN}/todo.md", **params}, ctx)
        return result.output

    assert "matches 2 places" in await edit(old_text="- a", new_text="- c")
    assert "not found" in await edit(old_text="- z", new_text="- c")
    assert "but count is 3" in await edit(old_text="- a", new_text="x", count=3)
    assert target.read_text() == "- a\n- b\n- a\n"
    assert await edit(old_text="- b", new_text="- B") == (
        f"edited {OWN}/todo.md: replaced 1 occurrence(s)"
    )
    assert await edit(old_text="- a", new_text="- A", count=2) == (
        f"edited {OWN}/todo.md: replaced 2 occurrence(s)"
    )
    assert target.read_text() == "- A\n- B\n- A\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


async def test_edit_of_the_operators_files_needs_an_admins_approval(
    registry: ToolRegistry, workspace: Path, make_ctx: MakeCtx
) -> None:
    (workspace / "config.toml").write_text("debug = false\n")
    params = {"path": "config.toml", "old_text": "false", "new_text": "true"}
    pending = await registry.execute("edit_file", params, make_ctx())
    assert pending.status == "approval_required" and pending.admins_only
    assert pending.reason == "it changes the operator's files (config.toml)"
    assert (workspace / "config.toml").read_text() == "debug = false\n"
    done = await registry.execute("edit_file", params, make_ctx(approved=True))
    assert done.status == "ok"
    assert (workspace / "config.toml").read_text() == "debug = true\n"


# ----------------------------------------------------------------- list_dir


async def test_list_dir(registry: ToolRegistry, workspace: Path, ctx: ToolContext) -> None:
    (workspace / "b.txt").write_text("")
    (workspace / "a").mkdir()
    (workspace / "a" / "inner.md").write_text("")
    (workspace / "a" / "sub").mkdir()
    flat = await registry.execute("list_dir", {}, ctx)
    assert flat.output == "a/\nb.txt"
    deep = await registry.execute("list_dir", {"path": ".", "recursive": True}, ctx)
    assert deep.output == "a/\nb.txt\na/inner.md\na/sub/"
    sub = await registry.execute("list_dir", {"path": "a/sub"}, ctx)
    assert sub.output == "(empty directory)"
    not_dir = await registry.execute("list_dir", {"path": "b.txt"}, ctx)
    assert "is a file, not a directory" in not_dir.output
    escape = await registry.execute("list_dir", {"path": ".."}, ctx)
    assert escape.status == "error"


async def test_list_dir_caps_entries(
    registry: ToolRegistry, workspace: Path, ctx: ToolContext, monkeypatch
) -> None:
    monkeypatch.setattr(files, "MAX_LIST_ENTRIES", 3)
    for i in range(5):
        (workspace / f"f{i}").write_text("")
    result = await registry.execute("list_dir", {"recursive": True}, ctx)
    assert result.output.splitlines()[:3] == ["f0", "f1", "f2"]
    assert "listing stopped at 3 entries" in result.output


def test_read_and_list_are_idempotent_writes_are_not(registry: ToolRegistry) -> None:
    idempotent = {name for name in registry.names() if registry.get(name).idempotent}
    assert {"read_file", "list_dir"} <= idempotent
    assert not idempotent & {"write_file", "edit_file", "exec"}


def test_workspace_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="workspace directory is not available"):
        resolve_in_workspace(tmp_path / "nope", "a.txt")
    assert os.path.exists(tmp_path)


def test_resolve_in_workspace_names_a_directory_for_another_process(workspace: Path) -> None:
    assert resolve_in_workspace(workspace, ".") == workspace.resolve()
    assert resolve_in_workspace(workspace, "a/../b") == workspace.resolve() / "b"
    for path in ("runtime", "chats", "chats/local-c1", ".env"):
        with pytest.raises(ToolError, match="protected"):
            resolve_in_workspace(workspace, path)
