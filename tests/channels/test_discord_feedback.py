"""Typing and read-acks under a burst on Discord (issue 13, item 3), counted at the fake.

Real discord.py (gateway for events, REST for replies, a second REST client for feedback),
real inbound pipeline and dispatcher, instant model, folding off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.discord.adapter import DiscordChannel
from soulflow.conversation.feedback import FeedbackPolicy
from tests.channels.adapters import discord_adapter, unpaced_discord
from tests.channels.feedback_rig import answer_through_cooldown, manager_rig, until
from tests.fakes.discord_api import FakeDiscord
from tests.running import running, running_fixture

BURST = 50


fake = running_fixture(unpaced_discord)


@pytest.fixture
async def channel(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[DiscordChannel]:
    async with running(discord_adapter(fake, tmp_path)) as adapter:
        yield adapter


def say(fake: FakeDiscord, text: str) -> None:
    fake.push_message(fake.channel_ids["general"], text, fake.user_ids["alice"],
                      mentions_bot=True)


def replies(fake: FakeDiscord) -> int:
    return sum(1 for m in fake.sent_messages if m.content == "ok")


def calls(fake: FakeDiscord, name: str) -> int:
    return sum(1 for r in fake.requests if r.name == name)


async def test_a_burst_in_one_channel_shows_one_typing_indicator_and_few_read_acks(
        fake: FakeDiscord, channel: DiscordChannel, tmp_path: Path) -> None:
    policy = FeedbackPolicy(typing_refresh_s=4.0, read_ack_interval_s=5.0, read_ack_backlog=2)
    async with manager_rig(tmp_path, channel, feedback=policy) as rig:
        for i in range(BURST):
            say(fake, f"message {i}")
        await until(lambda: rig.answered() >= BURST and replies(fake) >= BURST)
    typing, acks = calls(fake, "typing"), calls(fake, "add_reaction")
    assert 1 <= typing < BURST / 10, typing
    assert 1 <= acks <= 3, acks


async def test_a_429_on_feedback_cools_it_down_and_never_delays_replies(
        fake: FakeDiscord, channel: DiscordChannel, tmp_path: Path) -> None:
    fake.fail_next("add_reaction", 429, retry_after=60.0)
    fake.fail_next("typing", 429, retry_after=60.0)
    policy = FeedbackPolicy(typing_refresh_s=0.2, read_ack_interval_s=0.0, read_ack_backlog=100)
    await answer_through_cooldown(tmp_path, channel, policy, say=lambda t: say(fake, t),
                                  replies=lambda: replies(fake), refused=2)
    assert calls(fake, "add_reaction") == 1
    assert calls(fake, "typing") == 1
