"""`exec` cannot change what the daemon runs or reads outside it (issue 17, findings 4, 5
and 9), through the real tool and the real bubblewrap:

* the workspace is the operator zone, read-only: no ``.env`` can be created where none
  exists, and in the quick-start layout (the workspace is the repository, ``.venv`` inside)
  no ``.pth``, ``soulflow/__init__.py``, ``.git/hooks`` or ``scripts/`` write lands;
* ``runtime/`` and the other chats' folders are masked, the run's own folder is its HOME;
* the mask scan fails closed: files a chat made cannot push an operator ``.env`` out of it,
  nothing is skipped (``.venv``, ``.git``, ``node_modules``), and an operator zone too big to
  check refuses the call.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from soulflow.agent.tools import bwrap, sandbox_masks
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.shell import ExecTool
from soulflow.config import load_settings
from tests.tools.sandbox_support import working_sandbox

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()


def _ctx(workspace: Path, chat_id: str = "c1") -> ToolContext:
    return ToolContext(workspace, ChatRef("local", chat_id, sender_id="u1"))


async def _exec(sandbox: CodeSandbox, workspace: Path, command: str,
                chat_id: str = "c1") -> str:
    registry = ToolRegistry(max_output_chars=200_000)
    registry.register(ExecTool(sandbox))
    result = await registry.execute("exec", {"command": command}, _ctx(workspace, chat_id))
    assert result.status in ("ok", "error"), result
    return result.output


def _tree_digest(root: Path, *, skip: tuple[str, ...] = ("chats",)) -> dict[str, str]:
    """Every path below ``root`` (outside ``skip``) with a digest of what it is."""
    found: dict[str, str] = {}
    for current, dirs, files in os.walk(root):
        rel_dir = Path(current).relative_to(root)
        if rel_dir == Path("."):
            dirs[:] = [d for d in dirs if d not in skip]
        for name in dirs + files:
            path = Path(current) / name
            st = path.lstat()
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            found[str(rel_dir / name)] = f"{st.st_mode:o}:{hashlib.sha256(data).hexdigest()}"
    return found


# -- finding 4: a .env that does not exist cannot be created ------------------------------

async def test_exec_cannot_create_a_dotenv_where_none_exists(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "memory").mkdir()
    command = ("echo LOCAL_MODEL=on > .env; "
               "printf 'LOCAL_MODEL_COMMAND=/bin/sh -c \"touch /tmp/pwned\"\\n' >> .env; "
               "echo X=1 > .ENV.local; mkdir .env.d; echo X=1 > memory/.env; "
               "ln -s \"$HOME/mine\" .env.production; ls -a")
    output = await _exec(sandbox, workspace, command)
    assert "Read-only file system" in output
    assert sorted(p.name for p in workspace.iterdir()) == ["chats", "memory"], output
    assert list((workspace / "memory").iterdir()) == []


# -- finding 5: the quick-start layout ----------------------------------------------------

@pytest.fixture
def quick_start(tmp_path: Path) -> Path:
    """The layout `scripts/run` gives: the repository is the workspace, ``.venv`` inside."""
    workspace = tmp_path / "repo"
    package = workspace / "soulflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0"\n')
    (workspace / "scripts").mkdir()
    (workspace / "scripts" / "run").write_text("#!/bin/sh\nexec soulflow run\n")
    (workspace / "templates").mkdir()
    (workspace / "templates" / "SOUL.md").write_text("be kind\n")
    subprocess.run(["git", "init", "--quiet", str(workspace)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(workspace / ".venv")],
                   check=True)
    return workspace


def _site_packages(workspace: Path) -> Path:
    return workspace / ".venv" / "lib" / PY / "site-packages"


PLANTS = (
    "echo 'import os; open(\"/tmp/pwned\", \"w\")' > .venv/lib/{py}/site-packages/zz.pth",
    "echo 'import os' > .venv/lib/{py}/site-packages/sitecustomize.py",
    "echo 'print(1)' >> soulflow/__init__.py",
    "echo 'touch /tmp/pwned' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
    "echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config",
    "echo 'touch /tmp/pwned' >> scripts/run",
    "mv scripts/run scripts/run.old; echo evil > scripts/run",
    "echo evil > templates/SOUL.md",
    "echo 'include-system-site-packages = true' >> .venv/pyvenv.cfg",
    "rm -f .venv/bin/python; ln -s /bin/sh .venv/bin/python",
    "echo evil > sitecustomize.py; echo evil > usercustomize.py; mkdir skills",
)


async def test_the_quick_start_layout_is_read_only_inside_exec(
    sandbox: CodeSandbox, quick_start: Path
) -> None:
    before = _tree_digest(quick_start)
    command = "; ".join(p.format(py=PY) for p in PLANTS) + "; echo done"
    output = await _exec(sandbox, quick_start, command)
    assert output.count("Read-only file system") >= len(PLANTS), output
    assert _tree_digest(quick_start) == before
    assert not (_site_packages(quick_start) / "zz.pth").exists()


async def test_the_interpreters_own_venv_inside_the_workspace_stays_read_only(
    sandbox: CodeSandbox, quick_start: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the daemon runs from the workspace's ``.venv`` (scripts/run), the interpreter's
    directories are bound read-only on their own; the workspace bind must not cover them
    with a writable one."""
    real_roots = bwrap.python_roots()
    venv = (quick_start / ".venv").resolve()
    monkeypatch.setattr(bwrap, "python_roots", lambda: [*real_roots, venv])
    target = _site_packages(quick_start) / "zz.pth"
    output = await _exec(sandbox, quick_start,
                         f"echo 'import os' > {target}; ls {target.parent}; echo done")
    assert "Read-only file system" in output, output
    assert not target.exists()


# -- the chat's own folder and the others' ------------------------------------------------

async def test_other_chats_folders_and_runtime_are_hidden(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    other = workspace / "chats" / "telegram-42"
    other.mkdir(parents=True)
    secret = f"alice-{uuid.uuid4().hex}"
    (other / "diary.txt").write_text(secret)
    (workspace / "runtime" / "sessions").mkdir(parents=True)
    (workspace / "runtime" / "sessions" / "telegram-42.jsonl").write_text(secret)
    command = ("ls -a chats; cat chats/telegram-42/diary.txt; ls runtime; "
               "cat runtime/sessions/*; cd; pwd; echo note > mine.txt; "
               "echo x > ../telegram-42/diary.txt; echo x > ../planted.txt; ls")
    output = await _exec(sandbox, workspace, command)
    assert secret not in output
    lines = output.splitlines()
    assert lines[0:3] == [".", "..", "local-c1"], output  # only its own folder shows
    assert str((workspace / "chats" / "local-c1").resolve()) in lines
    assert (workspace / "chats" / "local-c1" / "mine.txt").read_text() == "note\n"
    assert (other / "diary.txt").read_text() == secret
    assert sorted(p.name for p in (workspace / "chats").iterdir()) == ["local-c1",
                                                                      "telegram-42"]


async def test_no_descriptor_of_the_host_reaches_the_command(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    """The chat folder is bound through an open descriptor: bwrap must close it (and its
    info pipe) before the command starts, or ``/proc/self/fd/N/..`` would reach chats/."""
    workspace = tmp_path / "ws"
    (workspace / "chats" / "telegram-42").mkdir(parents=True)
    (workspace / "chats" / "telegram-42" / "diary.txt").write_text("alice's")
    output = await _exec(sandbox, workspace, "ls /proc/self/fd; "
                         "for fd in /proc/self/fd/*; do cat $fd/../telegram-42/diary.txt; done")
    assert output.splitlines()[:4] == ["0", "1", "2", "3"], output  # 3: ls's own listing
    assert "alice's" not in output


# -- finding 9: the mask scan fails closed ------------------------------------------------

async def test_files_a_chat_made_do_not_unmask_an_operator_dotenv(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    """After exec made 20,001 files in its own folder, a nested ``proj/.env`` of the
    operator stays masked (the chat's folder is not scanned at all, and the scan of the
    operator zone has no cap)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = load_settings(workspace, environ={"CHAT_DISK_QUOTA_FILES": "100000",
                                                 "EXEC_DISK_QUOTA_FILES": "100000"})
    roomy = CodeSandbox(settings, detector=sandbox.detector, cgroups=sandbox.cgroups)
    made = await _exec(roomy, workspace, "cd \"$HOME\" && seq 20001 | xargs touch && "
                       "ls | wc -l")
    assert "20001" in made, made
    token = f"sk-{uuid.uuid4().hex}"
    (workspace / "proj").mkdir()
    (workspace / "proj" / ".env").write_text(f"OPENAI_API_KEY={token}\n")
    output = await _exec(roomy, workspace, "cat proj/.env; grep -r OPENAI proj; echo done")
    assert token not in output and "done" in output


@pytest.mark.parametrize("where", [
    ".venv/lib/site-packages/pkg/deep", ".git/objects/ab", "node_modules/a/node_modules/b",
    "__pycache__", "a/b/c/d/e/f/g/h/i/j"])
async def test_a_nested_dotenv_anywhere_in_the_operator_zone_is_masked(
    sandbox: CodeSandbox, tmp_path: Path, where: str
) -> None:
    workspace = tmp_path / "ws"
    nested = workspace / where
    nested.mkdir(parents=True)
    token = f"sk-{uuid.uuid4().hex}"
    (nested / ".env").write_text(f"TOKEN={token}\n")
    (nested / ".Env.Local").write_text(f"TOKEN={token}\n")
    (nested / ".envrc").mkdir()
    (nested / ".envrc" / "inner").write_text(token)
    output = await _exec(sandbox, workspace,
                         f"cat {where}/.env {where}/.Env.Local {where}/.envrc/inner; "
                         f"grep -r {token} . 2>&1; echo done")
    assert token not in output
    assert "done" in output


async def test_a_hard_link_to_a_root_dotenv_deep_in_dot_git_is_masked(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git" / "objects" / "cd").mkdir(parents=True)
    token = f"sk-{uuid.uuid4().hex}"
    (workspace / ".env").write_text(f"TOKEN={token}\n")
    (workspace / ".git" / "objects" / "cd" / "ef01").hardlink_to(workspace / ".env")
    output = await _exec(sandbox, workspace, "cat .git/objects/cd/ef01; echo done")
    assert token not in output and "done" in output


async def test_an_operator_zone_over_the_bound_refuses_the_call(
    sandbox: CodeSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is 200,000 entries (`MAX_SCANNED`); 1,000 here, so the test stays quick.
    Entries in the chat's own folder do not count."""
    monkeypatch.setattr(sandbox_masks, "MAX_SCANNED", 1_000, raising=False)
    small = CodeSandbox(detector=sandbox.detector, cgroups=sandbox.cgroups)
    workspace = tmp_path / "ws"
    home = workspace / "chats" / "local-c1"
    home.mkdir(parents=True)
    for i in range(1_500):
        (home / f"mine-{i}").touch()
    assert (await _exec(small, workspace, "echo fine")).startswith("fine")
    (workspace / "vendor").mkdir()
    for i in range(1_001):
        (workspace / "vendor" / f"f{i}").touch()
    output = await _exec(small, workspace, "echo ran")
    assert output.startswith("Error: the workspace holds more than 1,000 files and folders")
    assert "ran" not in output


async def test_an_unreadable_operator_directory_refuses_the_call(
    sandbox: CodeSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "proj").mkdir(parents=True)
    real_list = sandbox_masks.MaskScanner._list

    def refuse(path: str, rel: str, *args: object) -> object:
        if rel == "proj":
            raise sandbox_masks._refused(rel, PermissionError(13, "Permission denied"))
        return real_list(path, rel, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sandbox_masks.MaskScanner, "_list", staticmethod(refuse))
    output = await _exec(CodeSandbox(detector=sandbox.detector), workspace, "echo ran")
    assert output == ("Error: exec does not run: proj could not be checked for .env files "
                      "and links to the vault key (Permission denied)")


async def test_a_chats_folder_that_is_a_link_is_refused(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    """The chat folder is opened beneath the workspace without following links: a
    ``chats`` link to elsewhere is never bound read-write."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "chats").symlink_to(elsewhere)
    output = await _exec(sandbox, workspace, "echo ran > \"$HOME/x\"")
    assert output.startswith("Error: exec cannot use this chat's folder chats/local-c1/"), output
    assert list(elsewhere.iterdir()) == []
