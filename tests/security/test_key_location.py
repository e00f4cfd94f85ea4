"""Where the master key lives: inside the workspace by default (a backup is complete and a
restore just works), or wherever `SOULFLOW_MASTER_KEY_FILE` says; the daemon, the CLI and the
protected-path list always agree on it."""

from __future__ import annotations

import argparse
import shutil
import stat
from pathlib import Path

import pytest

from soulflow.cli.secret import run_secret_command
from soulflow.config import load_settings
from soulflow.security.errors import MissingKeyError
from soulflow.security.protected import key_file_path, protected_paths
from tests.vaults import workspace_vault


def _workspace(tmp_path: Path, name: str = "ws") -> Path:
    ws = tmp_path / name
    ws.mkdir()
    return ws


def test_default_key_is_inside_and_a_copied_workspace_restores(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    settings = load_settings(ws, environ={})
    vault = workspace_vault(settings)
    assert vault.key_path == ws / "runtime" / "security" / "master.key"
    vault.set("API_KEY", "value-1234567")
    restored = tmp_path / "restored"
    shutil.copytree(ws, restored, symlinks=True)  # copy2 keeps the 0600/0700 modes
    again = workspace_vault(load_settings(restored, environ={}))
    assert again.get("API_KEY") == "value-1234567"


def test_configured_key_file_is_used_by_daemon_cli_and_protection(tmp_path: Path,
                                                                  capsys) -> None:
    ws = _workspace(tmp_path)
    (ws / ".env").write_text("SOULFLOW_MASTER_KEY_FILE=keys/vault.key\n")
    settings = load_settings(ws, environ={})
    key = ws / "keys" / "vault.key"
    assert key_file_path(ws, settings["SOULFLOW_MASTER_KEY_FILE"]) == key
    daemon_vault = workspace_vault(settings)
    assert daemon_vault.key_path == key and key.is_file()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert not (ws / "runtime" / "security" / "master.key").exists()

    args = argparse.Namespace(secret_command="list")
    daemon_vault.set("FROM_DAEMON", "daemon-value-1")
    assert run_secret_command(settings, args) == 0
    assert "FROM_DAEMON\tglobal" in capsys.readouterr().out

    guard = protected_paths(ws, settings)
    assert guard.key_file == key.resolve()
    assert guard.check(key.resolve()) is not None
    assert key.resolve() in guard.mask_paths()  # outside runtime/: masked on its own

    # pointing the setting somewhere else without moving the key is caught, not papered over
    elsewhere = tmp_path / "offsite" / "master.key"
    moved = load_settings(ws, environ={"SOULFLOW_MASTER_KEY_FILE": str(elsewhere)})
    with pytest.raises(MissingKeyError, match="restore master.key"):
        workspace_vault(moved)
    shutil.move(key, elsewhere)  # the documented move: mv the file, then set the setting
    assert workspace_vault(moved).get("FROM_DAEMON") == "daemon-value-1"
    assert protected_paths(ws, moved).key_file == elsewhere.resolve()
