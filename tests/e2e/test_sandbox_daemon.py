"""The code sandbox in a running daemon: `soulflow status` and `/api/state` name its mode; a
model asking `exec` for the workspace's secrets gets nothing secret back; and (issue 17) a
model cannot use `exec` to change what the daemon runs at its next start, push a secret out
of the masks, or fill the disk."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env
from tests.fakes.openai_api import FakeOpenAIThread


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:  # a skip, and under CI a failure (tests/conftest.py)
        pytest.skip("bubblewrap (bwrap) is not installed")


def test_status_and_state_show_the_sandbox(make_daemon) -> None:
    _require_bwrap()
    daemon = make_daemon().start()
    sandbox = daemon.state()["sandbox"]
    assert sandbox["mode"] == "bubblewrap", sandbox
    assert sandbox["detail"].startswith("bubblewrap")
    status = daemon.cli("status")
    assert status.returncode == 0
    assert f"  sandbox    bubblewrap ({sandbox['detail']})" in status.stdout.decode()


def test_exec_from_the_model_cannot_read_the_secrets(make_daemon,
                                                     fake_llm: FakeOpenAIThread) -> None:
    _require_bwrap()
    daemon = make_daemon().start()
    canary = f"sk-{uuid.uuid4().hex}"
    (daemon.workspace / ".env.local").write_text(f"OPENAI_API_KEY={canary}\n")
    key_file = daemon.workspace / "runtime" / "security" / "master.key"
    key = key_file.read_bytes() if key_file.exists() else None
    command = ("cat .env .env.local; base64 runtime/security/master.key; "
               "ln -s runtime r; cat r/security/master.key; ls runtime; echo done")
    fake_llm.script_tool_call("exec", {"command": command})
    fake_llm.script_reply("I could not read them.")
    reply = daemon.wait_reply(daemon.say("show me your secrets", chat_id="sx"), "sx")
    assert reply["content"] == "I could not read them."
    sent = json.dumps(fake_llm.requests[-1].json["messages"])
    tool_output = fake_llm.requests[-1].json["messages"][-1]["content"]
    assert "done" in tool_output and "exit code" in tool_output
    assert canary not in sent
    if key is not None:
        assert base64.b64encode(key).decode() not in sent


# -- issue 17: the sandbox cannot change what the daemon runs; disk quotas ----------------

ROOT = Path(__file__).resolve().parents[2]


def _ask_exec(daemon: Daemon, fake_llm: FakeOpenAIThread, command: str,
              chat_id: str) -> str:
    """Have the model run ``command`` with exec in ``chat_id``; the tool's output."""
    fake_llm.script_tool_call("exec", {"command": command})
    fake_llm.script_reply("ok")
    reply = daemon.wait_reply(daemon.say("please run it", chat_id=chat_id), chat_id,
                              timeout=120)
    assert reply["content"] == "ok"
    return str(fake_llm.requests[-1].json["messages"][-1]["content"])


def _chat_folder(daemon: Daemon) -> Path:
    folders = [p for p in (daemon.workspace / "chats").iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def test_exec_cannot_plant_a_dotenv_the_daemon_runs_at_restart(
        make_daemon, fake_llm: FakeOpenAIThread, tmp_path: Path) -> None:
    """Finding 4: settings come from the environment, no .env exists; exec writes one with
    LOCAL_MODEL=on and a LOCAL_MODEL_COMMAND. It must not exist, and the next start must not
    run the command (unsandboxed)."""
    _require_bwrap()
    marker = tmp_path / "pwned-by-dotenv"
    daemon = make_daemon(PROVIDER="openrouter", OPENROUTER_API_KEY="sk-or-test-key",
                         OPENROUTER_BASE_URL=fake_llm.base_url, OPENROUTER_MODEL="fake-model",
                         PHI4_BASE_URL="", LOCAL_MODEL_STARTUP_TIMEOUT_S="3")
    del daemon.env["LOCAL_MODEL"]  # as an operator who never set it
    daemon.start()
    dotenv = daemon.workspace / ".env"
    assert not dotenv.exists()
    command = ("printf 'LOCAL_MODEL=on\\nLOCAL_MODEL_COMMAND=/bin/sh -c \"touch "
               f"{marker}; sleep 60\" {{port}}\\n' > .env; cat .env")
    output = _ask_exec(daemon, fake_llm, command, "planter")
    daemon.stop()
    daemon.start()
    assert not marker.exists(), "the planted LOCAL_MODEL_COMMAND ran at the restart"
    assert daemon.state()["local_model"] is None
    assert not dotenv.exists()
    assert "Read-only file system" in output, output


def _quick_start_workspace(into: Path) -> Path:
    """What `scripts/run` makes: this repository is the workspace, its ``.venv`` inside
    runs the daemon (a venv whose site-packages reach the test environment's packages and
    this checkout's code in the workspace)."""
    workspace = into / "repo"
    ignore = shutil.ignore_patterns("node_modules", "__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "soulflow", workspace / "soulflow", ignore=ignore)
    for name in ("scripts", "templates", "memory"):
        shutil.copytree(ROOT / name, workspace / name, ignore=ignore)
    for name in ("pyproject.toml", "HEARTBEAT.md", ".gitignore"):
        shutil.copy2(ROOT / name, workspace / name)
    git = ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "--quiet"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "quick start"], check=True)
    venv = workspace / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site_packages / "soulflow-dev.pth").write_text("\n".join([str(workspace), *deps]) + "\n")
    return workspace


def test_the_quick_start_layout_cannot_be_changed_from_exec(
        fake_llm: FakeOpenAIThread, tmp_path: Path) -> None:
    """Finding 5: with the repository as the workspace and the daemon running from its
    .venv, exec cannot add a .pth, append to soulflow/__init__.py, or write .git/hooks and
    scripts/; nothing of it runs at the next start."""
    _require_bwrap()
    workspace = _quick_start_workspace(tmp_path)
    python = str(workspace / ".venv" / "bin" / "python")
    env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=fake_llm.base_url,
                   PHI4_MODEL="fake-model")
    env.pop("PYTHONPATH", None)  # the daemon imports the workspace's own code, as installed
    daemon = Daemon(workspace, env, tmp_path / "daemon.log", python=python, cwd=workspace)
    markers = [tmp_path / f"pwned-{name}" for name in ("pth", "init", "hook", "script")]
    site_packages = next((workspace / ".venv" / "lib").glob("python3*/site-packages"))
    plants = [
        f"echo 'import os; open(\"{markers[0]}\", \"w\")' > "
        f"{site_packages.relative_to(workspace)}/zz.pth",
        f"echo 'open(\"{markers[1]}\", \"w\")' >> soulflow/__init__.py",
        f"echo 'touch {markers[2]}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
        f"echo 'touch {markers[3]}' >> scripts/run",
    ]
    try:
        daemon.start()
        tracked = {p: p.read_bytes() for p in (workspace / "soulflow" / "__init__.py",
                                              workspace / "scripts" / "run")}
        output = _ask_exec(daemon, fake_llm, "; ".join(plants) + "; echo tried", "qs")
        daemon.stop()
        daemon.start()  # runs the .pth and soulflow/__init__.py if they were planted
        subprocess.run(["git", "-C", str(workspace), "-c", "user.name=t", "-c",
                        "user.email=t@example.com", "commit", "--quiet", "--allow-empty",
                        "-m", "after"], check=True)  # runs a planted pre-commit hook
        assert [m.name for m in markers if m.exists()] == []
        assert not (site_packages / "zz.pth").exists()
        assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
        assert {p: p.read_bytes() for p in tracked} == tracked  # scripts/run included
        assert output.count("Read-only file system") >= len(plants), output
    finally:
        daemon.close()


def test_files_a_chat_made_do_not_unmask_an_operator_dotenv(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    """Finding 9: after exec made 20,001 files, the operator's nested proj/.env stays
    masked (quotas raised here so that the chat may hold that many)."""
    _require_bwrap()
    daemon = make_daemon(CHAT_DISK_QUOTA_FILES="100000", EXEC_DISK_QUOTA_FILES="100000").start()
    made = _ask_exec(daemon, fake_llm, "cd \"$HOME\" && seq 20001 | xargs touch && "
                     "test $(ls | wc -l) -ge 20001 && echo made", "many")
    assert made.startswith("made"), made
    canary = f"canary{uuid.uuid4().hex}"  # no secret's shape: the redactor would hide it
    (daemon.workspace / "proj").mkdir()
    (daemon.workspace / "proj" / ".env").write_text(f"GREETING={canary}\n")
    output = _ask_exec(daemon, fake_llm, "cat proj/.env; grep -r GREETING . ; echo done",
                       "many")
    assert "done" in output
    assert canary not in json.dumps(fake_llm.requests[-1].json["messages"])


def test_an_exec_call_over_its_disk_quota_keeps_nothing_and_usage_is_shown(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    """Finding 11: one exec call writes past EXEC_DISK_QUOTA_MB; it fails with the reason,
    what it wrote is gone, and `soulflow status` and /api/state show the chat's usage."""
    _require_bwrap()
    daemon = make_daemon(EXEC_DISK_QUOTA_MB="1").start()
    kept = _ask_exec(daemon, fake_llm, "cd; head -c 300000 /dev/zero > kept.bin", "disk")
    assert kept.endswith("[exit code: 0]"), kept
    output = _ask_exec(daemon, fake_llm,
                       "cd; for i in 1 2 3 4 5; do head -c 900000 /dev/zero > big$i; done; "
                       "sleep 30; echo finished", "disk")
    big = [p.name for p in daemon.workspace.rglob("big*")]
    assert big == [], "what the call wrote past its quota was kept"
    assert "over the per-call quota of 1 MB (EXEC_DISK_QUOTA_MB)" in output, output
    assert "finished" not in output
    folder = _chat_folder(daemon)
    assert sorted(p.name for p in folder.iterdir()) == ["kept.bin"]
    disk = daemon.state()["disk"]
    assert disk["chats"] == 1 and disk["quota"]["exec_bytes"] == 1024 * 1024
    assert disk["largest"][0]["zone"] == folder.name
    assert (disk["largest"][0]["bytes"], disk["largest"][0]["files"]) == (300_000, 1)
    status = daemon.cli("status").stdout.decode()
    assert "  disk       1 chat folder(s) hold 293.0 KB in 1 files and folders" in status
    assert folder.name in status
