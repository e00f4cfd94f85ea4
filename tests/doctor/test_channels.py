"""Each platform's token check through the real SDK against the loopback fakes: healthy,
down (port closed) and refusing the token (401)."""

from __future__ import annotations

from pathlib import Path

from soulflow.doctor.model import Status
from soulflow.doctor.runner import diagnose
from tests.doctor.conftest import BASE_ENV, closed_port_url, line
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram
from tests.running import running

SLACK_ENV = {**BASE_ENV, "SLACK_APP_TOKEN": "", "SLACK_DEFAULT_CHANNEL": "C0GENERAL1"}


async def test_slack_healthy_down_and_refused(workspace: Path) -> None:
    async with running(FakeSlack()) as fake:
        env = {**SLACK_ENV, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": fake.base_url}
        report = await diagnose(workspace, env, timeout_s=5)
        status, message, _ = line(report, "channel slack")
        assert status is Status.OK and "bot token works" in message
        assert any(r.method == "auth.test" for r in fake.requests)
        assert line(report, "clock")[0] is Status.OK  # the fake's Date header
        assert report.exit_code == 0

        wrong = {**env, "SLACK_BOT_TOKEN": "xoxb-0000000000-0000000000-wrongwrongwrong"}
        report = await diagnose(workspace, wrong, timeout_s=5)
        status, message, fix = line(report, "channel slack")
        assert status is Status.FAIL and "invalid_auth" in message
        assert "SLACK_BOT_TOKEN" in fix and report.exit_code == 1
        assert "wrongwrong" not in report.as_text()

    down = {**SLACK_ENV, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": closed_port_url("/api/")}
    report = await diagnose(workspace, down, timeout_s=5)
    status, message, fix = line(report, "channel slack")
    assert status is Status.FAIL and message.startswith("cannot reach Slack at")
    assert "SLACK_API_URL" in fix and report.exit_code == 1


async def test_slack_app_token_for_socket_mode(workspace: Path) -> None:
    async with running(FakeSlack()) as fake:
        env = {**BASE_ENV, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN,
               "SLACK_API_URL": fake.base_url}
        report = await diagnose(workspace, env, timeout_s=5)
        assert line(report, "channel slack socket")[0] is Status.OK
        wrong = {**env, "SLACK_APP_TOKEN": "xapp-1-A0WRONG-0000000000-wrongwrongwrong"}
        report = await diagnose(workspace, wrong, timeout_s=5)
        status, message, fix = line(report, "channel slack socket")
        assert status is Status.FAIL and "invalid_auth" in message
        assert "SLACK_APP_TOKEN" in fix and report.exit_code == 1


async def test_telegram_healthy_down_and_refused(workspace: Path) -> None:
    async with running(FakeTelegram()) as fake:
        env = {**BASE_ENV, "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN, "TELEGRAM_API_URL": fake.url}
        report = await diagnose(workspace, env, timeout_s=5)
        status, message, _ = line(report, "channel telegram")
        assert status is Status.OK and message.startswith("bot token works (@")
        assert report.exit_code == 0

        wrong = {**env, "TELEGRAM_BOT_TOKEN": "987654321:WRONG-token_ABCDEFGHIJKLMNOPQRS"}
        report = await diagnose(workspace, wrong, timeout_s=5)
        status, message, fix = line(report, "channel telegram")
        assert status is Status.FAIL and "401" in message and "@BotFather" in fix
        assert "WRONG-token" not in report.as_text() and report.exit_code == 1

    down = {**BASE_ENV, "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_API_URL": closed_port_url()}
    report = await diagnose(workspace, down, timeout_s=5)
    status, message, fix = line(report, "channel telegram")
    assert status is Status.FAIL and message.startswith("cannot reach Telegram at")
    assert "TELEGRAM_API_URL" in fix
    # PTB's errors quote the request URL, which holds the token: the report never does
    assert DEFAULT_TOKEN not in report.as_text() and DEFAULT_TOKEN not in report.as_json()


async def test_discord_healthy_down_and_refused(workspace: Path) -> None:
    async with FakeDiscord() as fake:
        env = {**BASE_ENV, "DISCORD_BOT_TOKEN": fake.token, "DISCORD_API_URL": fake.api_url}
        report = await diagnose(workspace, env, timeout_s=5)
        status, message, _ = line(report, "channel discord")
        assert status is Status.OK and "bot token works" in message
        assert report.exit_code == 0

        wrong = {**env, "DISCORD_BOT_TOKEN": "not-the-token-at-all"}
        report = await diagnose(workspace, wrong, timeout_s=5)
        status, message, fix = line(report, "channel discord")
        assert status is Status.FAIL and "401" in message and "DISCORD_BOT_TOKEN" in fix

    down = {**BASE_ENV, "DISCORD_BOT_TOKEN": "fake-bot-token",
            "DISCORD_API_URL": closed_port_url("/api/v10")}
    report = await diagnose(workspace, down, timeout_s=5)
    status, message, _ = line(report, "channel discord")
    assert status is Status.FAIL and message.startswith("cannot reach Discord at")
    assert report.exit_code == 1


async def test_no_channel_is_a_skip_line(workspace: Path) -> None:
    report = await diagnose(workspace, BASE_ENV, timeout_s=5)
    assert line(report, "channels")[0] is Status.SKIP
    assert line(report, "clock")[0] is Status.SKIP
    assert report.exit_code == 0
