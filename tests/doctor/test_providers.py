"""The provider check sends one tiny chat turn through the daemon's provider class, against
the OpenAI fake: healthy, down (port closed), answering 401; a silent server hits the
timeout instead of hanging the command."""

from __future__ import annotations

import asyncio
from pathlib import Path

from soulflow.doctor.model import Status
from soulflow.doctor.runner import diagnose
from tests.doctor.conftest import BASE_ENV, closed_port_url, line
from tests.fakes.openai_api import FakeOpenAI
from tests.running import running_fixture

KEY = "sk-or-v1-doctor-test-key-0123456789"


openai = running_fixture(FakeOpenAI)


def env_for(url: str) -> dict[str, str]:
    return {**BASE_ENV, "OPENROUTER_API_KEY": KEY, "OPENROUTER_BASE_URL": url,
            "OPENROUTER_MODEL": "test-model"}


async def test_provider_healthy(workspace: Path, openai: FakeOpenAI) -> None:
    openai.script_reply("OK")
    report = await diagnose(workspace, env_for(openai.base_url), timeout_s=5)
    status, message, _ = line(report, "provider openrouter")
    assert status is Status.OK and message.startswith("test-model answered in ")
    assert len(openai.requests) == 1  # one tiny request, no retries
    assert report.exit_code == 0


async def test_provider_refusing_the_key(workspace: Path, openai: FakeOpenAI) -> None:
    openai.script_error(401, {"error": {"message": "Invalid API key", "code": 401}})
    report = await diagnose(workspace, env_for(openai.base_url), timeout_s=5)
    status, message, fix = line(report, "provider openrouter")
    assert status is Status.FAIL and "HTTP 401" in message
    assert fix == "set OPENROUTER_API_KEY to a valid key"
    assert KEY not in report.as_text() and report.exit_code == 1


async def test_provider_down(workspace: Path) -> None:
    report = await diagnose(workspace, env_for(closed_port_url("/v1")), timeout_s=5)
    status, message, fix = line(report, "provider openrouter")
    assert status is Status.FAIL and message.startswith("cannot reach http://127.0.0.1:")
    assert "OPENROUTER_BASE_URL" in fix and report.exit_code == 1


async def test_a_silent_server_times_out_without_hanging(workspace: Path) -> None:
    """A server that accepts connections and never answers: every network check that uses it
    ends at its timeout and the report still comes back."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # keep the connection open, say nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        env = {**env_for(f"http://127.0.0.1:{port}/v1"),
               "TELEGRAM_BOT_TOKEN": "123:abc", "TELEGRAM_API_URL": f"http://127.0.0.1:{port}"}
        report = await asyncio.wait_for(diagnose(workspace, env, timeout_s=0.5), 60)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    # each ended at its own timeout (the report came back: nothing hung)
    status, message, _ = line(report, "provider openrouter")
    assert status is Status.FAIL and "no answer within 0.5s" in message
    status, message, _ = line(report, "channel telegram")
    assert status is Status.FAIL and "Timed out" in message
    assert line(report, "clock")[0] in (Status.WARN, Status.FAIL)
    assert report.exit_code == 1


async def test_no_provider_is_said_none_configured(workspace: Path) -> None:
    report = await diagnose(workspace, dict(BASE_ENV), timeout_s=5)  # LOCAL_MODEL=off
    status, message, fix = line(report, "providers")
    assert status is Status.WARN and message.startswith("none configured")
    assert "OPENROUTER_API_KEY" in fix
    status, message, _ = line(report, "settings")
    assert message == "valid (provider: none configured)"


async def test_settings_name_the_first_configured_provider(workspace: Path,
                                                          openai: FakeOpenAI) -> None:
    openai.script_reply("OK")
    report = await diagnose(workspace, env_for(openai.base_url), timeout_s=5)
    assert line(report, "settings")[1] == "valid (provider: first configured, openrouter)"
