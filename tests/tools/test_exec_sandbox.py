"""`exec` in the bubblewrap sandbox: the secrets a command tries to reach stay out of reach,
the host outside the workspace stays untouched, the network is off unless approved, and the
workspace itself is still an ordinary place to work."""

from __future__ import annotations

import base64
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.shell import NETWORK_REASON, ExecTool
from soulflow.config import load_settings
from tests.tools.listener import Listener
from tests.tools.sandbox_support import working_sandbox


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()


@dataclass
class Secrets:
    workspace: Path
    key: bytes
    token: bytes
    outside: Path  # a host directory next to the workspace

    def leaked_in(self, text: str) -> bool:
        forms = [self.key, base64.b64encode(self.key), self.key.hex().encode(), self.token]
        return any(form.decode() in text for form in forms)


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    workspace = tmp_path / "workspace"
    (workspace / "runtime" / "security").mkdir(parents=True)
    (workspace / "runtime" / "sessions").mkdir()
    key = f"KEY-{uuid.uuid4().hex}".encode()
    token = f"123456:TOKEN-{uuid.uuid4().hex}".encode()
    (workspace / "runtime" / "security" / "master.key").write_bytes(key)
    (workspace / "runtime" / "sessions" / "other-chat.jsonl").write_bytes(token)
    (workspace / ".env").write_bytes(b"TELEGRAM_BOT_TOKEN=" + token)
    (workspace / "project").mkdir()
    (workspace / "project" / ".env.local").write_bytes(b"API_KEY=" + token)
    (workspace / "notes.txt").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    return Secrets(workspace, key, token, outside)


def _registry(sandbox: CodeSandbox) -> ToolRegistry:
    registry = ToolRegistry(max_output_chars=200_000)
    registry.register(ExecTool(sandbox))
    return registry


def _ctx(workspace: Path, *, approved: bool = False) -> ToolContext:
    return ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"), approved=approved)


SECRET_COMMANDS = [
    "cat .env",
    "cat ./.ENV .env 2>&1; cat project/.env.local",
    "base64 runtime/security/master.key",
    "cat runtime/sessions/other-chat.jsonl",
    "cat \"$PWD/runtime/security/master.key\"",
    "cat ../workspace/runtime/security/master.key ../workspace/.env",
    "cat /proc/self/root$PWD/runtime/security/master.key",
    "cat /proc/1/root$PWD/.env",
    "cat /proc/1/environ; cat /proc/self/environ",
    "ln -s runtime x; cat x/security/master.key",
    "ln -s \"$PWD/.env\" e; cat e",
    "ln runtime/security/master.key hard 2>&1; cat hard",
    "umount runtime 2>&1; umount .env 2>&1; cat runtime/security/master.key .env",
    "mount -t tmpfs none /mnt 2>&1; unshare -rm sh -c 'umount runtime; cat runtime/security/*'",
    "cd /; grep -rs TOKEN- \"$OLDPWD\" /tmp /proc/1/cwd 2>/dev/null | head",
    "tar cf - . 2>/dev/null | strings | grep -e KEY- -e TOKEN-",
    "rm -rf runtime/security 2>&1; rm -f .env 2>&1; echo hacked > .env; ls -la",
]


@pytest.mark.parametrize("command", SECRET_COMMANDS)
async def test_secrets_stay_out_of_reach(
    command: str, sandbox: CodeSandbox, secrets: Secrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOULFLOW_TEST_TOKEN", secrets.token.decode())  # the daemon's env
    result = await _registry(sandbox).execute(
        "exec", {"command": command}, _ctx(secrets.workspace, approved=True))
    assert result.status in ("ok", "error")
    assert not secrets.leaked_in(result.output), result.output
    ws = secrets.workspace
    assert (ws / "runtime" / "security" / "master.key").read_bytes() == secrets.key
    assert (ws / ".env").read_bytes().endswith(secrets.token)


async def test_writes_outside_the_workspace_touch_nothing_on_the_host(
    sandbox: CodeSandbox, secrets: Secrets
) -> None:
    tag = uuid.uuid4().hex
    targets = [secrets.outside / tag, Path(f"/tmp/soulflow-exec-{tag}"),
               Path(f"/var/tmp/soulflow-exec-{tag}"), Path(f"/dev/shm/soulflow-exec-{tag}"),
               Path(f"/usr/local/soulflow-exec-{tag}"), Path(f"/root/soulflow-exec-{tag}")]
    command = "; ".join(f"echo pwned > {t} 2>&1; mkdir -p {t}.d 2>&1" for t in targets)
    registry = _registry(sandbox)
    result = await registry.execute("exec", {"command": command},
                                    _ctx(secrets.workspace, approved=True))
    assert result.status == "ok"
    every = targets + [t.with_name(t.name + ".d") for t in targets]
    created = [t for t in every if t.exists()]
    assert created == []


async def test_no_network_unless_approved_with_network_access(
    sandbox: CodeSandbox, secrets: Secrets, listener: Listener
) -> None:
    port = await listener.start()
    connect = (f"{sys.executable} -I -c \"import socket; "
               f"socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\"")
    if shutil.which("curl"):
        connect += f"; curl -sS -m 2 http://127.0.0.1:{port}/"
    registry = _registry(sandbox)
    plain = await registry.execute("exec", {"command": connect}, _ctx(secrets.workspace))
    assert plain.status == "ok" and "CONNECTED" not in plain.output
    assert listener.connections == 0

    asked = await registry.execute("exec", {"command": connect, "network": True},
                                   _ctx(secrets.workspace))
    assert asked.status == "approval_required" and asked.reason == NETWORK_REASON
    assert listener.connections == 0

    approved = await registry.execute("exec", {"command": connect, "network": True},
                                      _ctx(secrets.workspace, approved=True))
    assert "CONNECTED" in approved.output
    assert listener.connections >= 1


async def test_the_chat_folder_is_an_ordinary_place_to_work_and_the_rest_read_only(
    sandbox: CodeSandbox, secrets: Secrets
) -> None:
    """cwd is the workspace root (paths as the file tools take them), HOME the chat's own
    folder: the one place a command writes; the operator zone reads but never changes."""
    command = ("pwd; echo $HOME; cat notes.txt; echo more >> notes.txt; mkdir out; "
               "cd \"$HOME\" && echo mine > notes.txt && mkdir -p out/deep && "
               "echo made > out/deep/file.txt && ls")
    result = await _registry(sandbox).execute("exec", {"command": command},
                                              _ctx(secrets.workspace))
    assert result.status == "ok", result.output
    real = secrets.workspace.resolve()
    home = real / "chats" / "local-c1"
    lines = result.output.splitlines()
    assert lines[:3] == [str(real), str(home), "hello"]
    assert all("Read-only file system" in line for line in lines[3:5]), lines
    assert lines[5:] == ["notes.txt", "out", "[exit code: 0]"]
    assert (secrets.workspace / "notes.txt").read_text() == "hello\n"
    assert not (secrets.workspace / "out").exists()
    assert (home / "notes.txt").read_text() == "mine\n"
    assert (home / "out" / "deep" / "file.txt").read_text() == "made\n"


async def test_a_key_kept_elsewhere_in_the_workspace_is_masked_too(
    sandbox: CodeSandbox, secrets: Secrets
) -> None:
    (secrets.workspace / "keys").mkdir()
    (secrets.workspace / "keys" / "vault.key").write_bytes(secrets.key)
    settings = load_settings(secrets.workspace,
                             environ={"SOULFLOW_MASTER_KEY_FILE": "keys/vault.key"})
    configured = CodeSandbox(settings, detector=sandbox.detector, cgroups=sandbox.cgroups)
    result = await _registry(configured).execute(
        "exec", {"command": "cat keys/vault.key; base64 keys/vault.key"},
        _ctx(secrets.workspace))
    assert not secrets.leaked_in(result.output), result.output


async def test_destructive_commands_still_need_approval(
    sandbox: CodeSandbox, secrets: Secrets
) -> None:
    result = await _registry(sandbox).execute("exec", {"command": "rm -rf project"},
                                              _ctx(secrets.workspace))
    assert result.status == "approval_required"
    assert result.reason == "destructive command: recursive delete (rm -r)"
    assert (secrets.workspace / "project").exists()


async def test_a_hard_link_to_the_key_is_masked(sandbox: CodeSandbox, secrets: Secrets) -> None:
    key = secrets.workspace / "runtime" / "security" / "master.key"
    (secrets.workspace / "backup.bin").hardlink_to(key)
    result = await _registry(sandbox).execute(
        "exec", {"command": "cat backup.bin; base64 backup.bin"}, _ctx(secrets.workspace))
    assert not secrets.leaked_in(result.output), result.output


async def test_nothing_under_runtime_is_shared_any_more(
    sandbox: CodeSandbox, secrets: Secrets
) -> None:
    """Attachments moved from runtime/inbound-files/ into each chat's own folder
    (chats/<zone>/files/), so no runtime/ path is opened back into the sandbox by name: the
    whole of runtime/ stays masked, old attachment files included."""
    files = secrets.workspace / "runtime" / "inbound-files"
    (files / "local").mkdir(parents=True)
    mine = files / "local" / "AgAD123_report.txt"
    mine.write_bytes(secrets.token)
    command = (f"cat runtime/inbound-files/local/{mine.name}; cat {mine}; "
               "ls runtime/inbound-files/local; echo done")
    result = await _registry(sandbox).execute("exec", {"command": command},
                                              _ctx(secrets.workspace))
    assert "done" in result.output and mine.name not in result.output.split("\n")
    assert not secrets.leaked_in(result.output)
