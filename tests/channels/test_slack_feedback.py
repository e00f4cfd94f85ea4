"""Read-acks under a burst on Slack (issue 13, item 3), counted at the fake.

Real slack_sdk (history polling), real inbound pipeline and dispatcher, instant model, folding
off. Slack has no typing indicator for bots, so the read-ack (`reactions.add`) is the feedback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.slack.adapter import SlackChannel
from soulflow.conversation.feedback import FeedbackPolicy
from tests.channels.adapters import slack_adapter
from tests.channels.feedback_rig import answer_through_cooldown, manager_rig, until
from tests.fakes.rate_limits import SLACK_LIMITS
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_objects import BOT_USER_ID
from tests.running import running_fixture

GENERAL = "C0GENERAL1"
BURST = 50


fake = running_fixture(lambda: FakeSlack(limits=SLACK_LIMITS.relaxed()))


@pytest.fixture
async def channel(fake: FakeSlack, tmp_path: Path) -> AsyncIterator[SlackChannel]:
    adapter = slack_adapter(fake.base_url, tmp_path, default_channel=GENERAL,
                            poll_interval_s=0.02, send_interval_s=0.0)
    await adapter.start()
    await adapter.read()  # the first poll primes the cursor (history is never answered)
    try:
        yield adapter
    finally:
        await adapter.stop()


def replies(fake: FakeSlack) -> int:
    return len(fake.calls("chat.postMessage"))


async def test_a_burst_in_one_channel_gets_few_read_acks(fake: FakeSlack, channel: SlackChannel,
                                                         tmp_path: Path) -> None:
    policy = FeedbackPolicy(read_ack_interval_s=5.0, read_ack_backlog=2)
    async with manager_rig(tmp_path, channel, feedback=policy) as rig:
        for i in range(BURST):
            fake.post_user_message(GENERAL, f"<@{BOT_USER_ID}> message {i}")
        await until(lambda: rig.answered() >= BURST and replies(fake) >= BURST)
    acks = fake.calls("reactions.add")
    assert 1 <= len(acks) <= 3, len(acks)


async def test_a_429_on_read_acks_cools_them_down_and_never_delays_replies(
        fake: FakeSlack, channel: SlackChannel, tmp_path: Path) -> None:
    fake.fail_next("reactions.add", retry_after=60)
    policy = FeedbackPolicy(read_ack_interval_s=0.0, read_ack_backlog=100)
    await answer_through_cooldown(
        tmp_path, channel, policy,
        say=lambda text: fake.post_user_message(GENERAL, f"<@{BOT_USER_ID}> {text}"),
        replies=lambda: replies(fake), refused=1)
    assert len(fake.calls("reactions.add")) == 1
