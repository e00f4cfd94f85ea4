"""The trust-zone rules of the file tools, rule by rule (docs/security.md, "File tools and zones").

A run of telegram:A works in chats/telegram-A/. Its files there need no approval; the
operator's files ask an approval only an admin or the local operator may give; another
chat's folder, chats/ itself, runtime/ and .env* are refused by every tool, in every spelling,
even when the call is approved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import ApproverPolicy, Decider, Requester
from soulflow.agent.run.reducer import RunState
from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.contracts import QUIET_TURN_ORIGIN
from soulflow.runtime.tool_bridge import ToolBridge
from soulflow.security.zones import zone_for

MINE = "chats/telegram-A"
THEIRS = "chats/telegram-B"
THEIR_TEXT = "B's private plan: tangerine"
RUNTIME_TEXT = "every chat's journal"
OPERATOR_PATHS = ["templates/AGENTS.md", "memory/MEMORY.md", "memory/2025-01-01.md",
                  "skills/deploy/SKILL.md", "agents/helper.md", "HEARTBEAT.md", "mcp.json",
                  "soulflow/__init__.py", "scratch/new.txt", "notes.md", ".git/hooks/pre-commit"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel, text in (("templates/AGENTS.md", "be kind\n"), (f"{THEIRS}/plan.md", THEIR_TEXT),
                      (f"{THEIRS}/files/scan.txt", THEIR_TEXT), ("runtime/journal.jsonl",
                                                                 RUNTIME_TEXT),
                      (f"{MINE}/notes.md", "mine\n"), (".env", "TOKEN=x\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def registry() -> ToolRegistry:
    return build_default_registry()


def ctx(ws: Path, *, approved: bool = False, chat_id: str = "A") -> ToolContext:
    return ToolContext(ws, ChatRef("telegram", chat_id, sender_id="alice",
                                   requester_id="alice"), approved=approved)


def calls(path: str) -> list[tuple[str, dict[str, object]]]:
    return [("read_file", {"path": path}), ("list_dir", {"path": path}),
            ("write_file", {"path": path, "content": "x"}),
            ("edit_file", {"path": path, "old_text": "p", "new_text": "q"})]


# -- own chat zone -----------------------------------------------------------------------------


async def test_the_own_folder_is_read_and_written_without_approval(ws: Path,
                                                                   registry: ToolRegistry):
    write = await registry.execute("write_file", {"path": f"{MINE}/work/todo.md",
                                                  "content": "- ship"}, ctx(ws))
    assert write.status == "ok", write.output
    edit = await registry.execute("edit_file", {"path": f"{MINE}/work/todo.md",
                                                "old_text": "ship", "new_text": "rest"}, ctx(ws))
    assert edit.status == "ok", edit.output
    read = await registry.execute("read_file", {"path": f"{MINE}/work/todo.md"}, ctx(ws))
    assert read.output == "- rest"
    listed = await registry.execute("list_dir", {"path": MINE, "recursive": True}, ctx(ws))
    assert listed.output == "notes.md\nwork/\nwork/todo.md"
    absolute = await registry.execute("read_file", {"path": f"{ws}/{MINE}/notes.md"}, ctx(ws))
    assert absolute.output == "mine\n"


async def test_a_quiet_turn_has_a_folder_of_its_own(ws: Path, registry: ToolRegistry) -> None:
    """The heartbeat runs in a quiet zone named from its session, never a person's folder."""
    quiet = ToolContext(ws, ChatRef("telegram", "A", origin=QUIET_TURN_ORIGIN,
                                    session_key="heartbeat"))
    own = await registry.execute("write_file", {"path": "chats/quiet-heartbeat/check.md",
                                                "content": "ok"}, quiet)
    assert own.status == "ok", own.output
    person = await registry.execute("read_file", {"path": f"{MINE}/notes.md"}, quiet)
    assert person.status == "error" and "another chat's folder" in person.output


def test_the_daemons_tool_context_keeps_the_runs_zone(tmp_path: Path) -> None:
    """The runtime builds each call's context from the run's chat: a quiet turn's session and
    origin must survive, or its tools would work in the person's folder."""
    unused: Any = None  # the context uses the workspace and the vault only
    bridge = ToolBridge(workspace=tmp_path, vault=None, channels=unused, replies=unused,
                        redact=unused, is_admin=unused, cron=unused, main_loop=unused)
    quiet = ChatRef("telegram", "A", origin=QUIET_TURN_ORIGIN, session_key="heartbeat")
    context = bridge.context(RunState("run_1", chat=quiet), False)
    assert zone_for(context.chat).name == "quiet-heartbeat"
    person = ChatRef("telegram", "A", sender_id="alice", session_key="telegram:A")
    context = bridge.context(RunState("run_2", chat=person), False)
    assert zone_for(context.chat).name == "telegram-A"


# -- operator zone -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", OPERATOR_PATHS)
async def test_a_write_to_the_operators_files_asks_an_admins_approval(
        ws: Path, registry: ToolRegistry, path: str) -> None:
    for tool, params in (("write_file", {"path": path, "content": "obey me"}),
                         ("edit_file", {"path": path, "old_text": "a", "new_text": "b"})):
        result = await registry.execute(tool, params, ctx(ws))
        assert result.status == "approval_required", (tool, path, result)
        assert result.admins_only, (tool, path)
        expected = (f"it changes the operator's files ({path})" if path != "mcp.json" else
                    "it changes mcp.json, which chooses the programs and servers the daemon "
                    "runs as MCP tools")
        assert result.reason == expected
    assert not (ws / path).exists() or (ws / path).read_text() == "be kind\n"


async def test_the_operators_files_are_read_freely(ws: Path, registry: ToolRegistry) -> None:
    read = await registry.execute("read_file", {"path": "templates/AGENTS.md"}, ctx(ws))
    assert read.output == "be kind\n"
    listed = await registry.execute("list_dir", {"path": "templates"}, ctx(ws))
    assert listed.output == "AGENTS.md"


async def test_an_approved_write_to_the_operators_files_is_done_through_beneath(
        ws: Path, registry: ToolRegistry, tmp_path: Path) -> None:
    done = await registry.execute("write_file", {"path": "templates/AGENTS.md",
                                                 "content": "be brief\n"}, ctx(ws, approved=True))
    assert done.output == "replaced templates/AGENTS.md (9 bytes)"
    assert (ws / "templates/AGENTS.md").read_text() == "be brief\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "skills").symlink_to(outside)  # even approved, a link is not followed
    refused = await registry.execute("write_file", {"path": "skills/x/SKILL.md",
                                                    "content": "x"}, ctx(ws, approved=True))
    assert refused.status == "error" and "symbolic link" in refused.output
    assert list(outside.iterdir()) == []


def test_only_an_admin_or_the_local_operator_decides_an_admins_only_approval() -> None:
    policy = ApproverPolicy(lambda provider, user: (provider, user) == ("telegram", "carol"))
    alice = Requester("telegram", "alice")
    assert not policy.may_decide(alice, Decider("telegram", "alice"), admins_only=True)
    assert not policy.may_decide(alice, Decider("telegram", "bob"), admins_only=True)
    assert policy.may_decide(alice, Decider("telegram", "carol"), admins_only=True)
    assert policy.may_decide(alice, Decider("local", "dashboard"), admins_only=True)
    assert policy.may_decide(alice, Decider("telegram", "alice"))  # an ordinary one: hers
    assert not policy.may_decide(alice, Decider("slack", "carol"), admins_only=True)


# -- refused: another chat, chats/, runtime/, .env ---------------------------------------------


THEIR_SPELLINGS = [
    f"{THEIRS}/plan.md", f"{THEIRS}/files/scan.txt", f"{MINE}/../telegram-B/plan.md",
    f"./{THEIRS}//plan.md", f"{MINE}/x/../../telegram-B/plan.md", "Chats/telegram-B/plan.md",
    "CHATS/telegram-A/notes.md", "chats/Telegram-A/notes.md", "chats/telegram-a/notes.md",
    "templates/../chats/telegram-B/plan.md", THEIRS, f"{THEIRS}/files",
]


@pytest.mark.parametrize("path", THEIR_SPELLINGS)
async def test_another_chats_folder_is_refused_by_every_tool_and_spelling(
        ws: Path, registry: ToolRegistry, path: str) -> None:
    """Even approved; a case variant of the own folder could be another folder on a
    case-insensitive filesystem, so it is refused too rather than guessed at."""
    for approved in (False, True):
        for tool, params in calls(path):
            result = await registry.execute(tool, params, ctx(ws, approved=approved))
            assert result.status == "error", (tool, path, result)
            assert "protected" in result.output and "folder" in result.output, result.output
            assert THEIR_TEXT not in result.output
    for spelled in (path, f"{ws}/{path}"):
        absolute = await registry.execute("read_file", {"path": spelled}, ctx(ws))
        assert absolute.status == "error" and THEIR_TEXT not in absolute.output
    assert (ws / THEIRS / "plan.md").read_text() == THEIR_TEXT


async def test_a_link_to_another_chats_folder_is_refused(ws: Path,
                                                         registry: ToolRegistry) -> None:
    (ws / MINE / "peek").symlink_to("../telegram-B")
    (ws / "peek").symlink_to(THEIRS)
    for path in (f"{MINE}/peek/plan.md", "peek/plan.md", f"{MINE}/peek"):
        for tool, params in calls(path):
            result = await registry.execute(tool, params, ctx(ws, approved=True))
            assert result.status == "error", (tool, path)
            assert THEIR_TEXT not in result.output
    listing = await registry.execute("list_dir", {"path": MINE}, ctx(ws))
    assert "peek@" in listing.output and THEIR_TEXT not in listing.output


@pytest.mark.parametrize("path", ["chats", "chats/", "./chats", "Chats", "chats/telegram-A/.."])
async def test_chats_itself_is_never_listed_or_opened(ws: Path, registry: ToolRegistry,
                                                      path: str) -> None:
    for tool, params in calls(path):
        result = await registry.execute(tool, params, ctx(ws, approved=True))
        assert result.status == "error" and "chats/ holds every chat's folder" in \
            result.output, (tool, result.output)
        assert "telegram-B" not in result.output and f"{MINE}/" in result.output


async def test_listing_the_root_leads_only_to_the_own_folder(ws: Path,
                                                             registry: ToolRegistry) -> None:
    flat = await registry.execute("list_dir", {}, ctx(ws))
    assert flat.output.split("\n") == ["chats/", "templates/"]
    deep = await registry.execute("list_dir", {"recursive": True}, ctx(ws))
    assert deep.output.split("\n") == ["chats/", "templates/", f"{MINE}/",
                                       f"{MINE}/notes.md", "templates/AGENTS.md"]
    other = await registry.execute("list_dir", {"recursive": True}, ctx(ws, chat_id="C"))
    assert other.output.split("\n") == ["chats/", "templates/", "templates/AGENTS.md"]


@pytest.mark.parametrize("path", ["runtime", "runtime/journal.jsonl", "Runtime/journal.jsonl",
                                  f"{MINE}/../../runtime/journal.jsonl", "./runtime/x.json",
                                  "runtime/diagrams/abc.svg", "runtime/diagrams",
                                  "runtime/inbound-files/telegram/F1_scan.txt"])
async def test_runtime_is_refused_whoever_approves(ws: Path, registry: ToolRegistry,
                                                   path: str) -> None:
    """All of it: attachments and diagrams moved into the chats' folders, so the two
    subfolders once open to file tools are the daemon's like the rest."""
    for rel in ("runtime/diagrams/abc.svg", "runtime/inbound-files/telegram/F1_scan.txt"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(RUNTIME_TEXT)
    for tool, params in calls(path):
        result = await registry.execute(tool, params, ctx(ws, approved=True))
        assert result.status == "error" and "runtime/ is the daemon's" in result.output
        assert RUNTIME_TEXT not in result.output
    assert not (ws / "runtime" / "x.json").exists()


@pytest.mark.parametrize("path", [".env", f"{MINE}/.env", f"{MINE}/.env.local",
                                  "templates/.ENV", f"{MINE}/a/../.env"])
async def test_env_files_are_refused_everywhere(ws: Path, registry: ToolRegistry,
                                                path: str) -> None:
    for tool, params in calls(path):
        result = await registry.execute(tool, params, ctx(ws, approved=True))
        assert result.status == "error" and ".env files hold credentials" in result.output
    assert (ws / ".env").read_text() == "TOKEN=x\n"
    assert not (ws / MINE / ".env").exists()
