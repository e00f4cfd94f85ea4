"""Feedback under a burst on Telegram (issue 13, item 3), counted at the Bot API fake.

Real python-telegram-bot, real inbound pipeline and dispatcher, instant model, folding off
(fold_max=1) so every message is its own turn: the worst case for feedback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.telegram.adapter import TelegramChannel
from soulflow.conversation.feedback import FeedbackPolicy
from tests.channels.adapters import telegram_adapter
from tests.channels.feedback_rig import answer_through_cooldown, manager_rig, until
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running

USER = 4242
BURST = 50


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram(limits=TELEGRAM_LIMITS.relaxed())  # pacing is not under test here
    async with running(server):
        yield server


@pytest.fixture
async def channel(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[TelegramChannel]:
    async with running(telegram_adapter(fake.url, tmp_path, send_interval_s=0.0)) as adapter:
        yield adapter


def times(fake: FakeTelegram, method: str) -> list[float]:
    return [r.time for r in fake.calls(method)]


async def test_a_burst_in_one_chat_shows_one_typing_indicator_and_few_read_acks(
        fake: FakeTelegram, channel: TelegramChannel, tmp_path: Path) -> None:
    policy = FeedbackPolicy(typing_refresh_s=4.0, read_ack_interval_s=5.0, read_ack_backlog=2)
    async with manager_rig(tmp_path, channel, feedback=policy) as rig:
        for i in range(BURST):
            fake.push_message(USER, f"message {i}", from_id=USER)
        await until(lambda: rig.answered() >= BURST and len(fake.sent_texts(USER)) >= BURST)
        typing, acks = times(fake, "sendChatAction"), times(fake, "setMessageReaction")
    assert 1 <= len(typing) <= 1 + (typing[-1] - typing[0]) / 4.0 < BURST / 10
    assert all(b - a >= 4.0 - 0.05 for a, b in zip(typing, typing[1:], strict=False)), typing
    assert 1 <= len(acks) <= 3, acks  # not one per message
    stats = rig.conversation.feedback.stats
    assert stats.skipped_backlog + stats.skipped_interval >= BURST - 3


async def test_a_429_on_feedback_cools_it_down_and_never_delays_replies(
        fake: FakeTelegram, channel: TelegramChannel, tmp_path: Path) -> None:
    fake.fail_next("setMessageReaction", 429, retry_after=60)
    fake.fail_next("sendChatAction", 429, retry_after=60)
    policy = FeedbackPolicy(typing_refresh_s=0.2, read_ack_interval_s=0.0, read_ack_backlog=100)
    rig = await answer_through_cooldown(
        tmp_path, channel, policy, say=lambda text: fake.push_message(USER, text, from_id=USER),
        replies=lambda: len(fake.sent_texts(USER)), refused=2)
    assert len(fake.calls("setMessageReaction")) == 1
    assert len(fake.calls("sendChatAction")) == 1
    assert rig.conversation.feedback.stats.skipped_cooldown >= 5
