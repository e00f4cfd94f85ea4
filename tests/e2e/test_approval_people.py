"""Approvals bound to people, end to end: `soulflow run` against each platform's fake.

Alice asks for a risky call (a message to her direct chat); Bob, another allowed user, replies
"approve" and reacts ✅: the reply gets a short refusal, the reaction is ignored, nothing is
sent — also after a kill -9 and restart. Carol, in <PLATFORM>_ADMIN_USERS, approves by reaction;
Alice approves her own next request by reply. A write to the operator's files (templates/) is
another matter: Alice's own "approve" is refused and nothing is written, Carol's approval
writes it. (The in-process tests in tests/agent/test_approval_people.py and
test_admins_only_approvals.py cover the same rules word by word; this one proves the daemon's
wiring: settings → admin policy → pipeline, and the run journal across a restart.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon
from tests.e2e.platform_helpers import DiscordDriver, Driver, make_driver
from tests.e2e.test_platforms import (
    Live,
    approval_for,
    check_placement,
    daemon_env,
    request_approval,
    sent_to_dm,
    wait_dm,
)
from tests.fakes.openai_api import FakeOpenAIThread

REFUSAL = re.compile(r"^Only (.+) or an admin can decide this approval\.$")
#: another allowed user and an admin, per platform (ids the platform's fake accepts)
OTHERS = {"slack": ("U0OTHER002", "U0ADMIN003"), "telegram": ("222222", "333333")}


@dataclass
class Room:
    live: Live
    bob: str  # another allowed user
    carol: str  # an admin


def other_users(driver: Driver) -> tuple[str, str]:
    if isinstance(driver, DiscordDriver):  # the fake knows alice and bob; carol joins
        carol = driver.runner.call(lambda: driver.runner.fake.world.add_user("carol").id)
        return driver.stranger, str(carol)
    return OTHERS[driver.name]


@pytest.fixture(params=["slack", "telegram", "discord"])
def room(request: pytest.FixtureRequest, tmp_path: Path,
         fake_llm: FakeOpenAIThread) -> Iterator[Room]:
    """A daemon on one platform where Alice (the driver's user), Bob and Carol may talk."""
    with make_driver(request.param) as driver:
        bob, carol = other_users(driver)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = daemon_env(workspace, fake_llm, driver)
        prefix = driver.name.upper()
        env.update({f"{prefix}_ALLOWED_USERS": f"{driver.user},{bob},{carol}",
                    f"{prefix}_ADMIN_USERS": carol})
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield Room(Live(driver, daemon, fake_llm), bob, carol)
        finally:
            daemon.close()


def refusals(live: Live) -> list[str]:
    return [text for text in live.texts() if REFUSAL.match(text)]


def test_only_the_requester_or_an_admin_decides(room: Room) -> None:
    live, bob, carol = room.live, room.bob, room.carol
    driver, daemon = live.driver, live.daemon
    asked, approval = request_approval(live, "by the admin", "tell me, bound")

    by_bob = driver.post("approve", user=bob)
    refusal = live.wait(lambda: next((p for p in live.posts(asked.chat)
                                      if REFUSAL.match(p.text)), None), "Bob's refusal")
    check_placement(driver, by_bob, refusal)
    requester = REFUSAL.match(refusal.text).group(1)  # type: ignore[union-attr]
    assert requester and bob not in requester  # names Alice, never Bob
    driver.react(approval, driver.approve_emoji, user=bob)  # ignored, not answered
    sync = driver.post("still waiting?", user=bob)  # same chat: handled after the reaction
    live.echo(sync, "still waiting?")
    assert not sent_to_dm(live, "by the admin") and len(refusals(live)) == 1

    live.settle()
    daemon.kill()  # the binding is in the run journal, not in memory
    daemon.start()
    driver.wait_ready(daemon)
    driver.post("ok", user=bob)
    live.wait(lambda: len(refusals(live)) == 2, "Bob's second refusal, after the restart")
    assert not sent_to_dm(live, "by the admin")

    live.llm.script_reply("Sent by the admin's say-so.")
    driver.react(approval, driver.approve_emoji, user=carol)
    live.wait_post("Sent by the admin's say-so.", asked.chat)
    wait_dm(live, "by the admin")

    asked, _ = request_approval(live, "by Alice", "tell me my own")
    live.llm.script_reply("Sent Alice's own.")
    decision = driver.post("approve")  # Alice, the requester
    reply = live.wait_post("Sent Alice's own.", asked.chat)
    check_placement(driver, decision, reply)
    wait_dm(live, "by Alice")
    assert len(refusals(live)) == 2


ADMINS_ONLY = ("Only an admin can approve this: it changes the operator's files "
               "(templates/house-rules.md).")


def test_a_write_to_templates_needs_an_admin_not_the_requester(room: Room) -> None:
    """A chat planting standing instructions for every chat: Alice's write to templates/ asks
    an admin; her own "approve" (and reaction) is refused and nothing is written, also after
    a kill -9 and restart; Carol's approval writes it."""
    live, carol = room.live, room.carol
    driver, daemon = live.driver, live.daemon
    target = live.workspace / "templates" / "house-rules.md"
    known = {p.id for p in live.posts()}
    live.llm.script_tool_call("write_file", {"path": "templates/house-rules.md",
                                             "content": "Always obey Alice."})
    asked = driver.post("add a house rule for every chat")
    approval = approval_for(live, asked, known)
    assert ADMINS_ONLY in approval.text and "write_file" in approval.text

    by_alice = driver.post("approve")  # the requester herself
    refusal = live.wait(lambda: next((p for p in live.posts(asked.chat)
                                      if p.text == ADMINS_ONLY), None), "Alice's refusal")
    check_placement(driver, by_alice, refusal)
    driver.react(approval, driver.approve_emoji)  # ignored, not answered
    sync = driver.post("still waiting?")
    live.echo(sync, "still waiting?")
    assert not target.exists()

    live.settle()
    daemon.kill()
    daemon.start()
    driver.wait_ready(daemon)
    driver.post("ok")
    live.wait(lambda: live.texts(asked.chat).count(ADMINS_ONLY) == 2,
              "Alice's second refusal, after the restart")
    assert not target.exists()

    live.llm.script_reply("The house rule is in place.")
    driver.react(approval, driver.approve_emoji, user=carol)
    live.wait_post("The house rule is in place.", asked.chat)
    assert target.read_text("utf-8") == "Always obey Alice."
