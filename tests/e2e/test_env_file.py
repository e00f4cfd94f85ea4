"""`soulflow run` reads `.env` only when it is the operator's own: a link, a group- or
world-writable file, a second hard link or another user's file stops the start with one
sentence that says how to fix it, and `soulflow doctor` reports the same."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env
from tests.e2e.test_cli_and_dashboard import assert_one_sentence_error, run_cli


def _link(env: Path) -> str:
    real = env.parent / "chats" / "quiet-x" / "settings"  # where a tool could have written
    real.parent.mkdir(parents=True)
    real.write_text("LOG_LEVEL=info\n")
    env.symlink_to(real)
    return f"{env} is a symbolic link"


def _group_writable(env: Path) -> str:
    env.write_text("LOG_LEVEL=info\n")
    env.chmod(0o664)
    return f"{env} has mode 664: other users could change the settings"


def _hard_linked(env: Path) -> str:
    env.write_text("LOG_LEVEL=info\n")
    (env.parent / "chats").mkdir()
    os.link(env, env.parent / "chats" / "notes.txt")
    return f"{env} has 2 hard links"


def _foreign(env: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    env.write_text("LOG_LEVEL=info\n")
    os.chown(env, 4321, 4321)
    return f"{env} belongs to uid 4321, not to the daemon's user"


UNSAFE: dict[str, tuple[Callable[[Path], str], str]] = {
    "link": (_link, "replace the link with the file itself: cp --remove-destination"),
    "group-writable": (_group_writable, "then run: chmod go-w "),
    "hard-linked": (_hard_linked, "then give it a copy of its own: cp -p "),
    "foreign": (_foreign, "then run: chown "),
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_the_daemon_refuses_an_unsafe_env_and_doctor_says_so(tmp_path: Path, case: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make, fix = UNSAFE[case]
    problem = make(workspace / ".env")
    env = base_env(workspace)
    started = run_cli("run", env=env)
    assert_one_sentence_error(started, problem)
    assert fix in started.stderr.strip().splitlines()[-1]
    assert not (workspace / "runtime" / "daemon.json").exists()

    doctor = run_cli("doctor", env=env)
    assert doctor.returncode == 1, doctor.stdout
    line = next(ln for ln in doctor.stdout.splitlines() if ln.split()[1:2] == [".env"])
    assert line.startswith("FAIL") and problem in line, line
    assert fix in line.partition(" → fix: ")[2], line


def test_the_operators_own_env_is_read_at_start(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon()  # DASHBOARD_TOKEN is in neither its environment nor the CLI's
    env_file = daemon.workspace / ".env"
    env_file.write_text("DASHBOARD_TOKEN=from-the-env-file-0123456789\n")
    env_file.chmod(0o600)
    daemon.start()
    assert daemon.api("GET", "/api/state").status_code == 401  # the file's token is in force
    authorised = {"Authorization": "Bearer from-the-env-file-0123456789"}
    assert daemon.api("GET", "/api/state", headers=authorised).status_code == 200
    doctor = daemon.cli("doctor")
    assert b".env" in doctor.stdout and b"is private (600)" in doctor.stdout
