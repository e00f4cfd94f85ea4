"""A prompt-injected model asks the file tools for the key, the vault, `.env` and another chat's
files, by every path form it can write: each is refused and nothing secret comes back.
(tests/security/test_file_zones.py holds the zone rules path by path.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soulflow.agent.tools import build_default_registry, files
from soulflow.agent.tools.base import ChatRef, ToolContext, ToolError
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.workspace import tool_path
from soulflow.security.protected import protected_paths
from soulflow.security.vault import SecretVault
from soulflow.storage.beneath import Beneath
from tests.vaults import file_vault

ENV_TOKEN = "123456789:AAEhBOweik6ad9r_QXMENQjcrGbqCr4K-ZZ"
SESSION_TEXT = "chat B says the launch code is tangerine"
MINE = "chats/telegram-A"  # the zone of chat telegram:A, the one the tools run for


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".env").write_text(f"TELEGRAM_BOT_TOKEN={ENV_TOKEN}\n")
    (root / ".env.local").write_text(f"X={ENV_TOKEN}\n")
    (root / "notes.md").write_text("ordinary notes\n")
    sessions = root / "runtime" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "telegram_B.jsonl").write_text(SESSION_TEXT + "\n")
    return root


@pytest.fixture
def vault(ws: Path) -> SecretVault:
    vault = file_vault(ws / "runtime" / "security")
    vault.set("API_KEY", "sk-vault-value-123456")
    return vault


@pytest.fixture
def registry() -> ToolRegistry:
    return build_default_registry()


def _ctx(ws: Path, vault: SecretVault, chat_id: str = "A", approved: bool = False) -> ToolContext:
    return ToolContext(ws, ChatRef("telegram", chat_id, sender_id="u1"), vault=vault,
                       approved=approved)


def _secrets(ws: Path, vault: SecretVault) -> list[str]:
    key = vault.key_path.read_bytes()
    return [ENV_TOKEN, SESSION_TEXT, "sk-vault-value-123456", key.hex(),
            key.decode("latin-1"), '"ciphertext"']


PATH_FORMS = [
    ".env", "./.env", "notes/../.env", ".ENV", ".env.local", "sub/../.env.local",
    "runtime/security/master.key", "runtime/security/secrets.json", "runtime/security",
    "./runtime//security/master.key", "Runtime/security/master.key",
    "runtime/sessions/telegram_B.jsonl", "runtime/sessions", "runtime",
    "memory/../runtime/security/master.key",
]


@pytest.mark.parametrize("path", PATH_FORMS)
async def test_read_and_list_refuse_every_path_form(ws: Path, vault: SecretVault,
                                                     registry: ToolRegistry, path: str) -> None:
    ctx = _ctx(ws, vault, approved=True)  # even an approved call is refused
    for tool, params in (("read_file", {"path": path}), ("list_dir", {"path": path}),
                         ("edit_file", {"path": path, "old_text": "=", "new_text": "x"}),
                         ("write_file", {"path": path, "content": "x"})):
        result = await registry.execute(tool, params, ctx)
        assert result.status == "error", (tool, path, result)
        assert "protected" in result.output or "not found" in result.output, result.output
        for secret in _secrets(ws, vault):
            assert secret not in result.output
    assert (ws / ".env").read_text() == f"TELEGRAM_BOT_TOKEN={ENV_TOKEN}\n"
    assert vault.get("API_KEY") == "sk-vault-value-123456"


async def test_writes_are_refused_not_put_to_approval(ws: Path, vault: SecretVault,
                                                       registry: ToolRegistry) -> None:
    for path in (".env", ".env.production", "runtime/security/master.key", "runtime/x.json"):
        result = await registry.execute("write_file", {"path": path, "content": "x"},
                                        _ctx(ws, vault))
        assert result.status == "error" and "protected" in result.output, path
    assert not (ws / ".env.production").exists()
    assert not (ws / "runtime" / "x.json").exists()


async def test_symlinks_inside_the_workspace_to_protected_files(
        ws: Path, vault: SecretVault, registry: ToolRegistry,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (ws / "k").symlink_to(vault.key_path)
    (ws / "e").symlink_to(ws / ".env")
    (ws / "rt").symlink_to(ws / "runtime")
    (ws / "cwd").symlink_to("/proc/self/cwd")
    (ws / "root").symlink_to("/proc/self/root")
    ctx = _ctx(ws, vault)
    paths = ["k", "e", "rt/security/master.key", "rt/sessions/telegram_B.jsonl",
             f"root{ws}/.env", f"root{vault.key_path}"]
    monkeypatch.chdir(ws)
    paths.append("cwd/.env")
    for path in paths:
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error", path
        assert "symbolic link" in result.output or "protected" in result.output, path
        for secret in _secrets(ws, vault):
            assert secret not in result.output
    listing = await registry.execute("list_dir", {"path": "rt"}, ctx)
    assert listing.status == "error" and "symbolic link" in listing.output


async def test_hard_links_to_the_key_and_env_are_refused(ws: Path, vault: SecretVault,
                                                         registry: ToolRegistry) -> None:
    """Planted in the chat's own folder, where reading and editing need no approval, and in
    the operator's files, where even an admin-approved edit is refused."""
    mine = ws / MINE
    mine.mkdir(parents=True)
    os.link(vault.key_path, mine / "innocent.txt")
    os.link(ws / ".env", mine / "config.txt")
    os.link(ws / "runtime" / "sessions" / "telegram_B.jsonl", mine / "chat.txt")
    os.link(vault.key_path, ws / "operator.txt")
    ctx = _ctx(ws, vault)
    for path in (f"{MINE}/innocent.txt", f"{MINE}/config.txt", f"{MINE}/chat.txt",
                 "operator.txt"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "link" in result.output, (path, result.output)
        for secret in _secrets(ws, vault):
            assert secret not in result.output
        for tool, params in (("edit_file", {"path": path, "old_text": "a", "new_text": "b"}),
                             ("write_file", {"path": path, "content": "b"})):
            changed = await registry.execute(tool, params, _ctx(ws, vault, approved=True))
            assert changed.status == "error" and "protected" in changed.output, (tool, path)
    assert vault.get("API_KEY") == "sk-vault-value-123456"
    assert (ws / ".env").read_text() == f"TELEGRAM_BOT_TOKEN={ENV_TOKEN}\n"


async def test_list_dir_hides_protected_entries(ws: Path, vault: SecretVault,
                                                registry: ToolRegistry) -> None:
    """Refused paths are left out; a link is shown as a link (never followed), a hard link to
    the key not at all."""
    (ws / "k").symlink_to(vault.key_path)
    os.link(vault.key_path, ws / "innocent.txt")
    ctx = _ctx(ws, vault)
    flat = await registry.execute("list_dir", {}, ctx)
    assert flat.ok and "notes.md" in flat.output and "k@" in flat.output.split("\n")
    for hidden in (".env", "runtime", "k", "innocent.txt"):
        assert hidden not in flat.output.split("\n") and f"{hidden}/" not in flat.output
    deep = await registry.execute("list_dir", {"recursive": True}, ctx)
    assert deep.ok and "notes.md" in deep.output
    assert ".env" not in deep.output and "runtime" not in deep.output
    assert "master.key" not in deep.output and "telegram_B" not in deep.output
    assert "innocent" not in deep.output
    for secret in _secrets(ws, vault):
        assert secret not in flat.output + deep.output


async def test_only_this_chats_attachments_are_open(ws: Path, vault: SecretVault,
                                                    registry: ToolRegistry) -> None:
    """Attachments live in each chat's folder (chats/<zone>/files/): chat A reads its own;
    chat B's are refused by every tool, and so is the same chat id on another platform."""
    mine, theirs = ws / MINE / "files", ws / "chats" / "telegram-B" / "files"
    mine.mkdir(parents=True)
    theirs.mkdir(parents=True)
    (mine / "a.txt").write_text("chat A's file\n")
    (theirs / "b.txt").write_text("chat B's file\n")
    ctx = _ctx(ws, vault, "A")

    async def call(tool: str, path: str, context: ToolContext = ctx) -> tuple[str, str]:
        result = await registry.execute(tool, {"path": path}, context)
        return result.status, result.output

    assert await call("read_file", f"{MINE}/files/a.txt") == ("ok", "chat A's file\n")
    assert await call("list_dir", f"{MINE}/files") == ("ok", "a.txt")
    for tool, path in (("read_file", "chats/telegram-B/files/b.txt"),
                       ("list_dir", "chats/telegram-B/files"),
                       ("list_dir", "chats/telegram-B"),
                       ("list_dir", "chats")):
        status, output = await call(tool, path)
        assert status == "error" and "protected" in output, (tool, path)
        assert "chat B's file" not in output
    other = ToolContext(ws, ChatRef("slack", "A"), vault=vault)
    status, output = await call("read_file", f"{MINE}/files/a.txt", other)
    assert status == "error" and "protected" in output


def test_mask_paths_for_sandboxes(ws: Path, vault: SecretVault, tmp_path: Path) -> None:
    masked = protected_paths(ws).mask_paths()
    assert ws.resolve() / "runtime" in masked
    assert ws.resolve() / ".env" in masked and ws.resolve() / ".env.local" in masked
    outside_key = tmp_path / "keys" / "master.key"
    outside_key.parent.mkdir()
    outside_key.write_bytes(b"k" * 32)
    elsewhere = protected_paths(ws, key_file=outside_key)
    assert outside_key.resolve() in elsewhere.mask_paths()
    assert elsewhere.check(outside_key.resolve()) is not None


def test_the_read_checks_the_opened_file_again(ws: Path, vault: SecretVault) -> None:
    """A path that passed the zone check but names a secret under another name, or a link,
    by the time it is opened (here: handed over directly) is refused on what was opened."""
    mine = ws / MINE
    mine.mkdir(parents=True)
    os.link(vault.key_path, mine / "swapped.txt")
    (mine / "sym.txt").symlink_to(ws / "notes.md")
    (mine / "plain.txt").write_text("ordinary notes\n")
    ctx = _ctx(ws, vault)
    guard = protected_paths(ws, key_file=vault.key_path)
    beneath = Beneath(ws)
    with pytest.raises(ToolError, match="protected"):
        files._read_text(beneath, tool_path(ctx, f"{MINE}/swapped.txt"), guard)
    with pytest.raises(ToolError, match="symbolic link"):
        files._read_text(beneath, tool_path(ctx, f"{MINE}/sym.txt"), guard)
    assert files._read_text(beneath, tool_path(ctx, f"{MINE}/plain.txt"), guard) == \
        "ordinary notes\n"


async def test_absolute_paths(ws: Path, vault: SecretVault, registry: ToolRegistry) -> None:
    """Absolute spellings inside the workspace (how channels name saved attachments) get the
    same rules; anything else absolute, /proc/self/... included, is refused outright."""
    mine = ws / MINE / "files"
    mine.mkdir(parents=True)
    (mine / "f1_a.txt").write_text("attachment text\n")
    theirs = ws / "chats" / "telegram-B" / "files"
    theirs.mkdir(parents=True)
    (theirs / "f2_b.txt").write_text("chat B's attachment\n")
    ctx = _ctx(ws, vault)
    ok = await registry.execute("read_file", {"path": str(mine / "f1_a.txt")}, ctx)
    assert ok.output == "attachment text\n"
    notes = await registry.execute("read_file", {"path": f"{ws}/sub/../notes.md"}, ctx)
    assert notes.output == "ordinary notes\n"
    for path in (f"{ws}/.env", str(vault.key_path), f"{ws}/runtime/sessions/telegram_B.jsonl",
                 f"{ws}/runtime", f"{ws}/../ws/.env", str(theirs / "f2_b.txt"),
                 f"{ws}/{MINE}/../telegram-B/files/f2_b.txt"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "protected" in result.output, path
        assert "chat B's attachment" not in result.output
    for path in (f"/proc/self/root{ws}/.env", "/proc/self/cwd/.env", f"/proc/self/root{ws}",
                 "/etc/hostname"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "absolute paths are not allowed" in result.output
        for secret in _secrets(ws, vault):
            assert secret not in result.output
