"""A task in a Telegram group, end to end: `soulflow run` against the Bot API fake and the fake
model. Alice asks with `/task`, approves the plan; the gate's prompt is posted; Bob (another
allowed user) replies "ok" and gets a refusal, his ✅ reaction is ignored; Carol (an admin)
approves with a reaction on the prompt; the status message was edited in place and the result
is a reply. Proves the daemon's wiring: the tasks answering replies and reactions in the
conversation, the sent listener remembering prompt and status messages, and the adapter's
edit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env, wait_for
from tests.e2e.platform_helpers import BotPost, TelegramDriver
from tests.fakes.openai_api import FakeOpenAIThread

BOB, CAROL = "222222", "333333"
OWN = f"chats/telegram-{TelegramDriver.chat}"  # the group's own folder


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[TelegramDriver, Daemon, FakeOpenAIThread]]:
    with FakeOpenAIThread() as llm, TelegramDriver() as driver:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=llm.base_url,
                       PHI4_MODEL="fake-model", CHANNEL_SEND_INTERVAL_MS="50",
                       TASK_PROGRESS_INTERVAL_S="0", **driver.env())
        env.update({"TELEGRAM_ALLOWED_USERS": f"{driver.user},{BOB},{CAROL}",
                    "TELEGRAM_ADMIN_USERS": CAROL})
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield driver, daemon, llm
        finally:
            daemon.close()


def wait_post(driver: TelegramDriver, daemon: Daemon, needle: str) -> BotPost:
    def find() -> BotPost | None:
        return next((p for p in driver.posts(driver.chat) if needle in p.text), None)
    try:
        return wait_for(find, 20, what=f"a bot post containing {needle!r}")
    except AssertionError as exc:
        posts = [p.text[:100] for p in driver.posts(driver.chat)]
        raise AssertionError(f"{exc}\nposts: {posts}\nlog: {daemon.log()[-3000:]}") from None


def test_a_gate_is_decided_by_an_admins_reaction_not_by_another_user(
        live: tuple[TelegramDriver, Daemon, FakeOpenAIThread]) -> None:
    driver, daemon, llm = live
    llm.script_reply(json.dumps({"title": "Note after OK", "nodes": [
        {"id": "ok", "kind": "approval", "prompt": "Write the note?"},
        {"id": "think", "kind": "agent", "goal": "Think it over", "tools": [],
         "depends_on": ["ok"]},
        {"id": "note", "kind": "tool", "tool": "write_file", "depends_on": ["think"],
         "params": {"path": f"{OWN}/note.txt", "content": "noted"}}]}))
    driver.post("/task write a note after my OK")
    wait_post(driver, daemon, "Plan: Note after OK")
    driver.post("approve")
    prompt = wait_post(driver, daemon, "waits for approval at step ok")

    driver.post("ok", user=BOB)
    wait_post(driver, daemon, "can decide this approval.")
    driver.react(prompt, "👍", user=BOB)
    note = daemon.workspace / OWN / "note.txt"
    # the thinking step takes a moment (longer than the fake's group rate limit holds the
    # status message back): its status is then edited in place
    llm.script_delay(3.0)
    llm.script_reply("Thought it over.")
    driver.react(prompt, "👍", user=CAROL)
    wait_for(note.exists, 20, what="the note written after Carol's approval")
    assert note.read_text() == "noted"
    done = wait_post(driver, daemon, "is done.")
    assert f"created {OWN}/note.txt" in done.text
    status = [p for p in driver.posts(driver.chat) if "steps done" in p.text]
    assert len(status) == 1  # one status message, edited in place
    edited = [m for m in driver.runner.sent_messages if "steps done" in m.get("text", "")]
    assert edited and "edit_date" in edited[0]
    story = daemon.workspace / "runtime" / "tasks" / "details"
    [detail] = list(story.glob("*.md"))
    assert f"by {CAROL}" in detail.read_text()
