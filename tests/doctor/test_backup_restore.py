"""The backup and restore steps of docs/operations.md, followed literally: `tar -cpf` of the
workspace (and, when SOULFLOW_MASTER_KEY_FILE puts it elsewhere, of the key), extraction
somewhere else, then `soulflow doctor` and `soulflow secret list` on the copy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from soulflow.cli.main import main
from soulflow.config import load_settings
from soulflow.doctor.model import Status
from soulflow.doctor.runner import diagnose
from tests.doctor.conftest import BASE_ENV, line
from tests.vaults import workspace_vault


def tar(*args: str) -> None:
    subprocess.run(["tar", *args], check=True, capture_output=True)


def quiet_env(monkeypatch: pytest.MonkeyPatch, **extra: str) -> dict[str, str]:
    env = {**BASE_ENV, **extra}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SOULFLOW_WORKSPACE", raising=False)
    return env


async def test_a_restored_workspace_opens_its_vault(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = quiet_env(monkeypatch)
    ws = tmp_path / "live" / "ws"
    assert main(["init", str(ws)]) == 0
    (ws / ".env").write_text("LOG_LEVEL=info\n")
    (ws / ".env").chmod(0o600)
    workspace_vault(load_settings(ws, env)).set("GITHUB_TOKEN", "ghp-restored-value-1234")

    tar("-C", str(ws.parent), "-cpf", str(tmp_path / "backup.tar"), "ws")
    restored = tmp_path / "restored"
    restored.mkdir()
    tar("-C", str(restored), "-xpf", str(tmp_path / "backup.tar"))
    copy = restored / "ws"

    report = await diagnose(copy, env)
    assert line(report, "master key")[0] is Status.OK and report.exit_code == 0
    capsys.readouterr()
    assert main(["secret", "list", "--workspace", str(copy)]) == 0
    assert "GITHUB_TOKEN" in capsys.readouterr().out
    restored = workspace_vault(load_settings(copy, env))
    assert restored.get("GITHUB_TOKEN") == "ghp-restored-value-1234"


async def test_a_key_kept_elsewhere_must_be_restored_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "keys" / "soulflow.key"
    env = quiet_env(monkeypatch, SOULFLOW_MASTER_KEY_FILE=str(key))
    ws = tmp_path / "ws"
    assert main(["init", str(ws)]) == 0
    workspace_vault(load_settings(ws, env)).set("API_KEY", "value-kept-apart-9876")
    tar("-C", str(tmp_path), "-cpf", str(tmp_path / "ws.tar"), "ws")
    tar("-C", str(key.parent), "-cpf", str(tmp_path / "key.tar"), key.name)

    key.unlink()  # the machine is lost: only the two archives remain
    os.rename(ws, tmp_path / "lost")
    tar("-C", str(tmp_path), "-xpf", str(tmp_path / "ws.tar"))
    status, message, fix = line(await diagnose(ws, env), "master key")
    assert status is Status.FAIL and "cannot be opened" in message and str(key) in fix

    tar("-C", str(key.parent), "-xpf", str(tmp_path / "key.tar"))
    report = await diagnose(ws, env)
    assert line(report, "master key")[0] is Status.OK and report.exit_code == 0
    assert workspace_vault(load_settings(ws, env)).get("API_KEY") == "value-kept-apart-9876"
