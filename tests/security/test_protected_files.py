"""A prompt-injected model asks the file tools for the key, the vault, `.env` and another chat's
files, by every path form it can write: each is refused and nothing secret comes back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soulflow.agent.tools import build_default_registry, files
from soulflow.agent.tools.base import ChatRef, ToolContext, ToolError
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.security.protected import chat_dir_name, protected_paths
from soulflow.security.vault import SecretVault

ENV_TOKEN = "123456789:AAEhBOweik6ad9r_QXMENQjcrGbqCr4K-ZZ"
SESSION_TEXT = "chat B says the launch code is tangerine"


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
    vault = SecretVault(ws / "runtime" / "security")
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
        for secret in _secrets(ws, vault):
            assert secret not in result.output
    listing = await registry.execute("list_dir", {"path": "rt"}, ctx)
    assert listing.status == "error" and "protected" in listing.output


async def test_hard_links_to_the_key_and_env_are_refused(ws: Path, vault: SecretVault,
                                                         registry: ToolRegistry) -> None:
    os.link(vault.key_path, ws / "innocent.txt")
    os.link(ws / ".env", ws / "config.txt")
    os.link(ws / "runtime" / "sessions" / "telegram_B.jsonl", ws / "chat.txt")
    ctx = _ctx(ws, vault)
    for path in ("innocent.txt", "config.txt", "chat.txt"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "link" in result.output, (path, result.output)
        for secret in _secrets(ws, vault):
            assert secret not in result.output
        edit = await registry.execute(
            "edit_file", {"path": path, "old_text": "a", "new_text": "b"}, ctx)
        assert edit.status == "error" and "protected" in edit.output


async def test_list_dir_hides_protected_entries(ws: Path, vault: SecretVault,
                                                registry: ToolRegistry) -> None:
    (ws / "k").symlink_to(vault.key_path)
    ctx = _ctx(ws, vault)
    flat = await registry.execute("list_dir", {}, ctx)
    assert flat.ok and "notes.md" in flat.output
    for hidden in (".env", "runtime", "k"):
        assert hidden not in flat.output.split("\n") and f"{hidden}/" not in flat.output
    deep = await registry.execute("list_dir", {"recursive": True}, ctx)
    assert deep.ok and "notes.md" in deep.output
    assert ".env" not in deep.output and "runtime" not in deep.output
    assert "master.key" not in deep.output and "telegram_B" not in deep.output


async def test_only_this_chats_attachments_are_open(ws: Path, vault: SecretVault,
                                                    registry: ToolRegistry) -> None:
    inbound = ws / "runtime" / "inbound-files" / "telegram"
    inbound.mkdir(parents=True)
    (inbound / "abc123_report.txt").write_text("flat attachment\n")
    mine, theirs = inbound / chat_dir_name("A"), inbound / chat_dir_name("B")
    mine.mkdir()
    theirs.mkdir()
    (mine / "a.txt").write_text("chat A's file\n")
    (theirs / "b.txt").write_text("chat B's file\n")
    ctx = _ctx(ws, vault, "A")

    async def call(tool: str, path: str) -> tuple[str, str]:
        result = await registry.execute(tool, {"path": path}, ctx)
        return result.status, result.output

    assert await call("read_file", "runtime/inbound-files/telegram/abc123_report.txt") == (
        "ok", "flat attachment\n")
    assert await call("read_file", f"runtime/inbound-files/telegram/{mine.name}/a.txt") == (
        "ok", "chat A's file\n")
    assert (await call("list_dir", f"runtime/inbound-files/telegram/{mine.name}"))[0] == "ok"
    for tool, path in (("read_file", f"runtime/inbound-files/telegram/{theirs.name}/b.txt"),
                       ("list_dir", f"runtime/inbound-files/telegram/{theirs.name}"),
                       ("list_dir", "runtime/inbound-files/telegram"),
                       ("list_dir", "runtime/inbound-files")):
        status, output = await call(tool, path)
        assert status == "error" and "protected" in output, (tool, path)
        assert "chat B's file" not in output and "abc123" not in output
    other = ToolContext(ws, ChatRef("slack", "A"), vault=vault)
    result = await registry.execute(
        "read_file", {"path": "runtime/inbound-files/telegram/abc123_report.txt"}, other)
    assert result.status == "error" and "protected" in result.output


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
    """A path that passed the check but was swapped before the read (here: handed over
    directly) is refused on the open descriptor."""
    os.link(vault.key_path, ws / "swapped.txt")
    (ws / "sym.txt").symlink_to(ws / "notes.md")
    guard = protected_paths(ws, key_file=vault.key_path)
    with pytest.raises(ToolError, match="protected"):
        files._read_text(ws / "swapped.txt", "swapped.txt", guard)
    with pytest.raises(ToolError, match="could not open"):
        files._read_text(ws / "sym.txt", "sym.txt", guard)  # a last-hop link is not followed
    assert files._read_text(ws / "notes.md", "notes.md", guard) == "ordinary notes\n"


async def test_absolute_paths(ws: Path, vault: SecretVault, registry: ToolRegistry) -> None:
    """Absolute spellings inside the workspace (how channels name saved attachments) get the
    same rules; anything else absolute, /proc/self/... included, is refused outright."""
    inbound = ws / "runtime" / "inbound-files" / "telegram"
    inbound.mkdir(parents=True)
    (inbound / "f1_a.txt").write_text("attachment text\n")
    ctx = _ctx(ws, vault)
    ok = await registry.execute("read_file", {"path": str(inbound / "f1_a.txt")}, ctx)
    assert ok.output == "attachment text\n"
    notes = await registry.execute("read_file", {"path": f"{ws}/sub/../notes.md"}, ctx)
    assert notes.output == "ordinary notes\n"
    for path in (f"{ws}/.env", str(vault.key_path), f"{ws}/runtime/sessions/telegram_B.jsonl",
                 f"{ws}/runtime", f"{ws}/../ws/.env"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "protected" in result.output, path
    for path in (f"/proc/self/root{ws}/.env", "/proc/self/cwd/.env", f"/proc/self/root{ws}",
                 "/etc/hostname"):
        result = await registry.execute("read_file", {"path": path}, ctx)
        assert result.status == "error" and "absolute paths are not allowed" in result.output
        for secret in _secrets(ws, vault):
            assert secret not in result.output
