"""Channel health in `/api/state` follows the platform: failing while the fake fails, back to
connected when it heals; sends on every platform, reads on Telegram (a getUpdates outage)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.platform_helpers import DiscordDriver, TelegramDriver
from tests.e2e.test_platforms import Live, fresh_daemon
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture(params=["slack", "telegram", "discord"])
def live(request: pytest.FixtureRequest, llm: FakeOpenAIThread,
         tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon(request.param, llm, tmp_path)


@pytest.fixture
def telegram(llm: FakeOpenAIThread, tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon("telegram", llm, tmp_path)


def channel(live: Live) -> dict[str, Any]:
    return next(c for c in live.daemon.state()["channels"] if c["name"] == live.driver.name)


def test_failing_sends_show_in_the_channel_state_and_clear_when_they_succeed(
        live: Live) -> None:
    first = live.driver.post("hello health")
    live.echo(first, "hello health")
    healthy = channel(live)
    assert healthy["status"] == "connected" and healthy["send_failures"] == 0
    assert healthy["last_send_at"] is not None and healthy["last_read_at"] is not None
    if isinstance(live.driver, DiscordDriver):  # discord.py retries 429s itself, not 503s
        live.driver.runner.fail_next("send_message", 503, count=2)
    else:
        live.driver.fail_sends(2)
    failing = live.driver.post("through a 429")
    seen = live.wait(lambda: (c := channel(live))["send_failures"] >= 1 and c,
                     "the send failure in the channel state")
    assert seen["last_error"].startswith("send: ") and seen["last_error_at"] is not None
    live.echo(failing, "through a 429", timeout=30)
    recovered = live.wait(lambda: (c := channel(live))["send_failures"] == 0 and c,
                          "the send failures to clear")
    assert recovered["last_send_at"] > healthy["last_send_at"]


def test_a_telegram_polling_outage_is_failing_then_connected(telegram: Live) -> None:
    driver = telegram.driver
    assert isinstance(driver, TelegramDriver)
    before = channel(telegram)["last_read_at"]
    driver.runner.fail_next("getUpdates", 500, count=3)
    driver.runner.drop_long_polls()  # the poll in flight ends; the next ones get 500s
    failing = telegram.wait(lambda: (c := channel(telegram))["status"] == "failing" and c,
                            "the channel to show as failing")
    assert failing["consecutive_failures"] >= 1 and "polling failed" in failing["last_error"]
    telegram.wait(lambda: (c := channel(telegram))["status"] == "connected"
                  and c["consecutive_failures"] == 0 and c["last_read_at"] > before,
                  "the channel to recover", timeout=30)
    after = driver.post("after the outage")
    telegram.echo(after, "after the outage")
