"""Approvals bound to people, end to end: `soulflow run` against the Slack fake (Socket Mode).

Alice asks for a risky call; Bob, another allowed user, replies "approve" and reacts ✅:
the reply gets a short refusal, the reaction is ignored, the file is not written — also after
a kill -9 and restart. Carol, in SLACK_ADMIN_USERS, approves by reaction; Alice approves her
own next request by reply. (The in-process tests in tests/agent/test_approval_people.py cover
the same rule word by word; this one proves the daemon's wiring: settings → admin policy →
pipeline, and the run journal across a restart.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon
from tests.e2e.platform_helpers import SlackDriver
from tests.e2e.test_platforms import Live, check_placement, daemon_env, request_approval
from tests.fakes.openai_api import FakeOpenAIThread

BOB, CAROL = "U0OTHER002", "U0ADMIN003"
REFUSAL = re.compile(r"^Only (.+) or an admin can decide this approval\.$")


@pytest.fixture
def live(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Live]:
    with SlackDriver() as driver:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = daemon_env(workspace, fake_llm, driver)
        env.update(SLACK_ALLOWED_USERS=f"{driver.user},{BOB},{CAROL}", SLACK_ADMIN_USERS=CAROL)
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield Live(driver, daemon, fake_llm)
        finally:
            daemon.close()


def refusals(live: Live) -> list[str]:
    return [text for text in live.texts() if REFUSAL.match(text)]


def test_only_the_requester_or_an_admin_decides(live: Live) -> None:
    driver, daemon = live.driver, live.daemon
    target = live.workspace / "notes" / "bound.txt"
    asked, approval = request_approval(live, "notes/bound.txt", "by the admin", "save bound")

    by_bob = driver.post("approve", user=BOB)
    refusal = live.wait(lambda: next((p for p in live.posts(asked.chat)
                                      if REFUSAL.match(p.text)), None), "Bob's refusal")
    check_placement(driver, by_bob, refusal)
    requester = REFUSAL.match(refusal.text).group(1)  # type: ignore[union-attr]
    assert requester and "0002" not in requester  # names Alice, never Bob
    driver.react(approval, driver.approve_emoji, user=BOB)  # ignored, not answered
    sync = driver.post("still waiting?", user=BOB)  # same chat: handled after the reaction
    live.echo(sync, "still waiting?")
    assert not target.exists() and len(refusals(live)) == 1

    live.settle()
    daemon.kill()  # the binding is in the run journal, not in memory
    daemon.start()
    driver.wait_ready(daemon)
    driver.post("ok", user=BOB)
    live.wait(lambda: len(refusals(live)) == 2, "Bob's second refusal, after the restart")
    assert not target.exists()

    live.llm.script_reply("Saved by the admin's say-so.")
    driver.react(approval, driver.approve_emoji, user=CAROL)
    live.wait_post("Saved by the admin's say-so.", asked.chat)
    assert target.read_text("utf-8") == "by the admin"

    asked, _ = request_approval(live, "notes/own.txt", "by Alice", "save my own")
    live.llm.script_reply("Saved Alice's own.")
    decision = driver.post("approve")  # Alice, the requester
    reply = live.wait_post("Saved Alice's own.", asked.chat)
    check_placement(driver, decision, reply)
    assert (live.workspace / "notes" / "own.txt").read_text("utf-8") == "by Alice"
    assert len(refusals(live)) == 2
