"""Folding on Slack, Telegram and Discord: messages that queue up in a chat while its turn
runs are answered by one reply, in order, through each platform's real SDK and fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_platforms import Live, check_placement, fresh_daemon
from tests.fakes.openai_api import FakeOpenAIThread

HOLD_S = 6.0  # the first answer's model call; the burst is journaled well within it


@pytest.fixture(params=["slack", "telegram", "discord"])
def live(request: pytest.FixtureRequest, llm: FakeOpenAIThread,
         tmp_path: Path) -> Iterator[Live]:
    yield from fresh_daemon(request.param, llm, tmp_path)


def test_a_burst_behind_a_running_turn_gets_one_reply_in_order(live: Live) -> None:
    driver, daemon = live.driver, live.daemon
    live.llm.script_delay(HOLD_S)
    first = driver.post("fold first")
    live.wait(lambda: "fold first" in live.user_texts_seen_by_model(), "the first model call")
    burst = [driver.post(f"fold part {i}") for i in range(1, 4)]
    live.wait(lambda: daemon.state()["queues"]["inbound_pending"] == 4,
              "the burst to be journaled behind the running turn")
    live.echo(first, "fold first", timeout=30)
    folded = live.wait(lambda: next((p for p in live.posts(first.chat)
                                     if "[3] " in p.text), None), "the folded reply")
    lines = folded.text.removeprefix("echo: ").splitlines()
    assert lines[0] == "(3 messages arrived while I was busy; answer them together, in order.)"
    assert [line.split(": ", 1)[1] for line in lines[1:]] == \
        ["fold part 1", "fold part 2", "fold part 3"]
    check_placement(driver, burst[-1], folded)  # it answers the last of them
    live.settle()
    assert daemon.state()["queues"]["inbound_pending"] == 0
    assert len(live.llm.requests) == 2  # two turns for four messages
    assert [p.text for p in live.posts(first.chat)].count(folded.text) == 1
