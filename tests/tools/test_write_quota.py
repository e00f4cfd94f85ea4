"""`write_file`, `edit_file` and `diagram_render` are held to the chat folder's disk quota,
like `exec`: over it the call fails with the reason and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.security.quota import QuotaLimits, ZoneQuotas
from soulflow.security.zones import zone_for

CHAT = ChatRef("telegram", "A", sender_id="alice", requester_id="alice")
KB = 1024


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / zone_for(CHAT).rel).mkdir(parents=True)
    (root / "templates").mkdir()
    return root


def registry(*, chat_bytes: int = 8 * KB, chat_files: int = 20):
    limits = QuotaLimits(chat_bytes=chat_bytes, chat_files=chat_files, exec_bytes=chat_bytes,
                         exec_files=chat_files)
    return build_default_registry(sandbox=CodeSandbox(quotas=ZoneQuotas(limits)))


def mine(name: str) -> str:
    return f"{zone_for(CHAT).rel.as_posix()}/{name}"


async def test_a_write_over_the_chats_byte_quota_is_refused_and_not_written(ws: Path) -> None:
    tools = registry()
    ctx = ToolContext(ws, CHAT)
    done = await tools.execute("write_file", {"path": mine("a.txt"), "content": "x" * 6 * KB},
                               ctx)
    assert done.ok, done
    over = await tools.execute("write_file", {"path": mine("b.txt"), "content": "y" * 4 * KB},
                               ctx)
    assert over.status == "error" and "CHAT_DISK_QUOTA_MB" in over.output
    assert not (ws / mine("b.txt")).exists()
    # replacing a file with a shorter one adds nothing, so it is always allowed
    shorter = await tools.execute("write_file", {"path": mine("a.txt"), "content": "z"}, ctx)
    assert shorter.ok, shorter


async def test_an_edit_that_grows_a_file_past_the_quota_is_refused(ws: Path) -> None:
    tools = registry()
    ctx = ToolContext(ws, CHAT)
    (ws / mine("notes.md")).write_text("seed\n" + "x" * 6 * KB)
    grown = await tools.execute("edit_file", {"path": mine("notes.md"), "old_text": "seed",
                                              "new_text": "y" * 4 * KB}, ctx)
    assert grown.status == "error" and "CHAT_DISK_QUOTA_MB" in grown.output
    assert (ws / mine("notes.md")).read_text().startswith("seed\n")


async def test_new_files_and_folders_count_against_the_file_quota(ws: Path) -> None:
    tools = registry(chat_files=3)
    ctx = ToolContext(ws, CHAT)
    assert (await tools.execute("write_file", {"path": mine("one"), "content": "1"}, ctx)).ok
    deep = await tools.execute("write_file", {"path": mine("d/e/f/two"), "content": "2"}, ctx)
    assert deep.status == "error" and "CHAT_DISK_QUOTA_FILES" in deep.output
    assert not (ws / mine("d")).exists()


async def test_an_approved_write_to_the_operators_files_is_not_charged_to_the_chat(
        ws: Path) -> None:
    tools = registry(chat_bytes=KB)
    approved = ToolContext(ws, CHAT, approved=True)
    done = await tools.execute("write_file", {"path": "templates/ROLE.md",
                                              "content": "x" * 4 * KB}, approved)
    assert done.ok, done
