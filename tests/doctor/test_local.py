"""The checks that need no network: files and permissions, settings, the dashboard port,
CLI providers, the clock comparison; and the command's output and exit code."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from soulflow.cli.main import main
from soulflow.doctor.model import DoctorContext, Status
from soulflow.doctor.remote import check_clock
from soulflow.doctor.runner import diagnose
from soulflow.security.crypto import KEY_SIZE
from tests.doctor.conftest import BASE_ENV, line
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack


def make_key(path: Path, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(KEY_SIZE))
    path.chmod(mode)


async def test_loose_permissions_fail_with_the_chmod(workspace: Path) -> None:
    security = workspace / "runtime" / "security"
    make_key(security / "master.key", 0o644)
    security.chmod(0o755)
    (workspace / ".env").write_text("LOG_LEVEL=info\n")
    (workspace / ".env").chmod(0o644)
    report = await diagnose(workspace, BASE_ENV)
    assert line(report, "master key")[0] is Status.FAIL
    assert line(report, "master key")[2] == f"chmod 600 {security / 'master.key'}"
    assert line(report, ".env") == (
        Status.FAIL, f"{workspace / '.env'} has mode 644: every user can read its tokens",
        f"chmod 600 {workspace / '.env'}")
    assert line(report, "security dir")[0] is Status.WARN
    assert report.exit_code == 1

    (security / "master.key").chmod(0o600)
    (workspace / ".env").chmod(0o600)
    security.chmod(0o700)
    report = await diagnose(workspace, BASE_ENV)
    assert {line(report, n)[0] for n in ("master key", ".env", "security dir")} == {Status.OK}
    assert report.exit_code == 0


async def test_master_key_file_setting_is_honoured(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "keys" / "soulflow.key"
    make_key(outside)
    env = {**BASE_ENV, "SOULFLOW_MASTER_KEY_FILE": str(outside)}
    status, message, _ = line(await diagnose(workspace, env), "master key")
    assert status is Status.OK and str(outside) in message and "SOULFLOW_MASTER_KEY_FILE" in message

    outside.chmod(0o640)
    assert line(await diagnose(workspace, env), "master key")[0] is Status.FAIL

    # the setting names a missing file while the default key exists: the daemon would make a
    # new key and lose every secret, so this is a FAIL with the move to make
    default = workspace / "runtime" / "security" / "master.key"
    make_key(default)
    moved = {**BASE_ENV, "SOULFLOW_MASTER_KEY_FILE": str(tmp_path / "keys" / "missing.key")}
    status, message, fix = line(await diagnose(workspace, moved), "master key")
    assert status is Status.FAIL and fix.startswith(f"mv {default} ")


async def test_vault_without_key_fails(workspace: Path) -> None:
    security = workspace / "runtime" / "security"
    security.mkdir(parents=True, mode=0o700)
    (security / "secrets.json").write_text("{}")
    status, message, fix = line(await diagnose(workspace, BASE_ENV), "master key")
    assert status is Status.FAIL and "cannot be opened" in message and "backup" in fix


async def test_invalid_settings_fail_and_dependent_checks_skip(workspace: Path) -> None:
    report = await diagnose(workspace, {**BASE_ENV, "DASHBOARD_PORT": "99999"})
    status, message, _ = line(report, "settings")
    assert status is Status.FAIL and "DASHBOARD_PORT must be an integer" in message
    assert line(report, "dashboard port")[0] is Status.SKIP
    assert report.exit_code == 1


async def test_missing_workspace(tmp_path: Path) -> None:
    report = await diagnose(tmp_path / "nowhere", BASE_ENV)
    assert line(report, "workspace")[2] == f"soulflow init {tmp_path / 'nowhere'}"
    assert report.exit_code == 1


async def test_dashboard_port_in_use_by_another_program(workspace: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        report = await diagnose(workspace, {**BASE_ENV, "DASHBOARD_PORT": str(port)})
        status, message, fix = line(report, "dashboard port")
        assert status is Status.FAIL and "in use by another program" in message
        assert "DASHBOARD_PORT" in fix
    report = await diagnose(workspace, {**BASE_ENV, "DASHBOARD_PORT": str(port)})
    assert line(report, "dashboard port")[0] is Status.OK


async def test_cli_provider_binary_missing(workspace: Path) -> None:
    env = {**BASE_ENV, "PROVIDER": "claude_code", "CLAUDE_COMMAND": "no-such-claude-binary -p"}
    status, message, fix = line(await diagnose(workspace, env), "provider claude_code")
    assert status is Status.FAIL and "no-such-claude-binary is not on PATH" in message
    assert "CLAUDE_COMMAND" in fix


@pytest.mark.parametrize(("offset_s", "expected"), [
    (0.0, Status.OK), (60.0, Status.WARN), (-3600.0, Status.FAIL)])
async def test_clock_skew_against_the_platform_date(workspace: Path, offset_s: float,
                                                    expected: Status) -> None:
    import time

    fake = FakeSlack()
    await fake.start()
    try:
        env = {**BASE_ENV, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": fake.base_url,
               "SLACK_DEFAULT_CHANNEL": "C1"}
        ctx = DoctorContext.load(workspace, env, timeout_s=5)
        ctx.clock = lambda: time.time() + offset_s
        [result] = await check_clock(ctx)
    finally:
        await fake.stop()
    assert result.status is expected
    if expected is not Status.OK:
        assert "timedatectl set-ntp true" in result.fix
        assert ("ahead of" if offset_s > 0 else "behind") in result.message


def test_command_prints_lines_and_exits_nonzero_on_fail(
        workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in BASE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert main(["doctor", "--workspace", str(workspace)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("ok    workspace")
    assert out.splitlines()[-1].startswith("0 FAIL,")

    (workspace / ".env").write_text("AGENT_MAX_TURNS=0\n")
    (workspace / ".env").chmod(0o600)
    assert main(["doctor", "--workspace", str(workspace), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["counts"]["FAIL"] == 1
    failed = [c for c in data["checks"] if c["status"] == "FAIL"]
    assert failed[0]["name"] == "settings" and "AGENT_MAX_TURNS" in failed[0]["message"]


async def test_traces_are_checked_as_the_daemon_would_start_them(workspace: Path) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")
    report = await diagnose(workspace, BASE_ENV)
    assert line(report, "traces")[0] is Status.SKIP
    endpoint = {**BASE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:pw@127.0.0.1:4318"}
    status, message, _ = line(await diagnose(workspace, endpoint), "traces")
    assert status is Status.OK and "http://127.0.0.1:4318" in message and "pw" not in message
    report = await diagnose(workspace, {**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    status, message, fix = line(report, "traces")
    assert status is Status.WARN and "http/json" in message and "http/protobuf" in fix
