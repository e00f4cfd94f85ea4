"""The embedded-model check: cheap by default (packages and GGUF file), `--deep` starts the
server once. Missing pieces FAIL with the install command or the setting to fix."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from soulflow.doctor.model import Status
from soulflow.doctor.runner import diagnose
from soulflow.providers.local_runtime import INSTALL_HINT, local_model_available
from tests.doctor.conftest import BASE_ENV, line


def local_python() -> str:
    python = os.environ.get("SOULFLOW_LOCAL_PYTHON") or sys.executable
    reason = local_model_available(python)
    if reason:
        pytest.fail(f"needs soulflow[local]: {reason} (deselect with -m 'not "
                    "requires_local_model')", pytrace=False)
    return python


async def test_an_interpreter_without_the_packages_fails(workspace: Path) -> None:
    env = {**BASE_ENV, "LOCAL_MODEL": "on", "LOCAL_MODEL_PYTHON": "/nonexistent/python3"}
    status, message, fix = line(await diagnose(workspace, env), "local model")
    assert status is Status.FAIL and "/nonexistent/python3" in message and fix == INSTALL_HINT


async def test_a_missing_server_command_or_model_file_fails(workspace: Path) -> None:
    env = {**BASE_ENV, "LOCAL_MODEL": "on",
           "LOCAL_MODEL_COMMAND": "no-such-llama-server --port {port} -m {model}"}
    status, message, fix = line(await diagnose(workspace, env), "local model")
    assert status is Status.FAIL and "no-such-llama-server" in message
    assert "LOCAL_MODEL_COMMAND" in fix


async def test_another_provider_means_not_used(workspace: Path) -> None:
    env = {**BASE_ENV, "LOCAL_MODEL": "auto", "PHI4_BASE_URL": "http://127.0.0.1:9/v1"}
    assert line(await diagnose(workspace, env), "local model")[0] is Status.SKIP


@pytest.mark.requires_local_model
async def test_installed_and_deep_start(workspace: Path) -> None:
    python = local_python()
    env = {**BASE_ENV, "LOCAL_MODEL": "on", "LOCAL_MODEL_PYTHON": python,
           "LOCAL_MODEL_THREADS": "1"}
    status, message, _ = line(await diagnose(workspace, env), "local model")
    assert status is Status.OK and "--deep" in message

    env_missing = {**env, "LOCAL_MODEL_PATH": str(workspace / "missing.gguf")}
    status, message, fix = line(await diagnose(workspace, env_missing), "local model")
    assert status is Status.FAIL and "missing.gguf" in message and "LOCAL_MODEL_PATH" in fix

    report = await diagnose(workspace, env, deep=True)
    status, message, _ = line(report, "local model")
    assert status is Status.OK, message
    assert message == "the server started and answered its health check"
