"""Streamed replies end to end: `soulflow run` against each platform's fake, through the real
SDKs, with a model that writes its answer slowly.

The answer appears as one message, edited as it grows, and ends holding exactly the final text;
a SIGKILL mid-stream leaves, after the restart, that same message edited into the whole answer;
a 429 on an edit delays the text but never loses it; STREAM_REPLIES=off sends it once, whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env, wait_for
from tests.e2e.platform_helpers import BotPost, Driver, Posted, make_driver
from tests.fakes.openai_api import FakeOpenAIThread

PLATFORMS = ("slack", "telegram", "discord")
ANSWER = " ".join(f"word{i:02d}" for i in range(40)) + " and that is the whole answer."
CHUNK_DELAY_S = 0.05  # 40 words: about two seconds of writing


@contextlib.contextmanager
def streaming_daemon(name: str, tmp_path: Path, llm: FakeOpenAIThread,
                     **env: str) -> Iterator[tuple[Driver, Daemon]]:
    llm.reset()
    with make_driver(name) as driver:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        daemon = Daemon(workspace, base_env(
            workspace, PROVIDER="phi4_local", PHI4_BASE_URL=llm.base_url,
            PHI4_MODEL="fake-model", CHANNEL_SEND_INTERVAL_MS="50",
            STREAM_EDIT_INTERVAL_S="0.3", **driver.env(), **env), tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield driver, daemon
        finally:
            daemon.close()


@contextlib.contextmanager
def local_daemon(tmp_path: Path, llm: FakeOpenAIThread) -> Iterator[Daemon]:
    """A daemon with only its local chat, started."""
    llm.reset()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    daemon = Daemon(workspace, base_env(
        workspace, PROVIDER="phi4_local", PHI4_BASE_URL=llm.base_url,
        PHI4_MODEL="fake-model", STREAM_EDIT_INTERVAL_S="0.3"), tmp_path / "daemon.log")
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.close()


def replies_to(driver: Driver, posted: Posted) -> list[BotPost]:
    """The bot's messages in the asker's chat after `posted` (ids grow with time on every
    platform; Slack's are timestamps)."""
    return [p for p in driver.posts(posted.chat) if Decimal(p.id) > Decimal(posted.id)]


def wait(daemon: Daemon, predicate, what: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    try:
        return wait_for(predicate, timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- daemon log (tail) ---\n{daemon.log()[-4000:]}"
                             ) from None


@pytest.mark.parametrize("name", PLATFORMS)
def test_a_slow_answer_grows_in_one_message_that_ends_as_the_final_text(
        name: str, tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with streaming_daemon(name, tmp_path, fake_llm) as (driver, daemon):
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)
        asked_at = time.monotonic()
        posted = driver.post("tell me slowly")
        partial = wait(daemon, lambda: next((p.text for p in replies_to(driver, posted)
                                             if p.text), None), "the first text to show")
        first_text_s = time.monotonic() - asked_at
        assert ANSWER.startswith(partial) and partial != ANSWER
        wait(daemon, lambda: [p.text for p in replies_to(driver, posted)] == [ANSWER],
             "the one message to hold the whole answer")
        full_s = time.monotonic() - asked_at
        assert first_text_s < full_s
        assert driver.edit_attempts() >= 2  # it grew in place
        assert len(replies_to(driver, posted)) == 1


@pytest.mark.parametrize("name", PLATFORMS)
def test_a_kill_mid_stream_leaves_one_message_edited_into_the_whole_answer(
        name: str, tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with streaming_daemon(name, tmp_path, fake_llm) as (driver, daemon):
        fake_llm.script_reply(ANSWER, chunk_delay_s=0.2)  # the drive the kill interrupts
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)  # the one after it
        posted = driver.post("an answer the daemon dies writing")
        # an edit means the first piece's id came back and was recorded before it
        wait(daemon, lambda: driver.edit_attempts() >= 1 and replies_to(driver, posted),
             "the answer to show and grow once")
        assert replies_to(driver, posted)[0].text != ANSWER
        daemon.kill()
        daemon.start()
        driver.wait_ready(daemon)
        wait(daemon, lambda: [p.text for p in replies_to(driver, posted)] == [ANSWER],
             "the message to be edited into the whole answer after the restart")
        sync = driver.post("after the restart")
        wait(daemon, lambda: any(p.text == "echo: after the restart"
                                 for p in replies_to(driver, sync)), "the next reply")
        assert [p.text for p in replies_to(driver, posted)][:1] == [ANSWER]
        assert sum(p.text == ANSWER for p in driver.posts(posted.chat)) == 1


@pytest.mark.parametrize("name", PLATFORMS)
def test_a_429_on_an_edit_delays_the_text_but_never_loses_it(
        name: str, tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with streaming_daemon(name, tmp_path, fake_llm) as (driver, daemon):
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)
        posted = driver.post("answer through a rate limit")
        wait(daemon, lambda: replies_to(driver, posted), "the first text to show")
        driver.fail_edits(3)
        wait(daemon, lambda: [p.text for p in replies_to(driver, posted)] == [ANSWER],
             "the whole answer despite the 429s")
        assert driver.edit_attempts() >= 4  # the three refused, then the ones that took


def test_with_streaming_off_the_answer_is_sent_once_whole(
        tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with streaming_daemon("telegram", tmp_path, fake_llm, STREAM_REPLIES="off") as (
            driver, daemon):
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)
        posted = driver.post("not streamed")
        wait(daemon, lambda: [p.text for p in replies_to(driver, posted)] == [ANSWER],
             "the answer")
        assert driver.edit_attempts() == 0


def test_the_local_chat_shows_the_answer_growing_then_whole(
        tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with local_daemon(tmp_path, fake_llm) as daemon:
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)
        asked = daemon.say("tell me slowly")
        growing = wait(daemon, lambda: next((m for m in daemon.replies()
                                             if m.get("reply_to") == asked
                                             and m.get("partial")), None),
                       "the answer to show while it is written")
        assert ANSWER.startswith(growing["content"]) and growing["content"] != ANSWER
        whole = daemon.wait_reply(asked, timeout=30)
        assert whole["content"] == ANSWER
        assert [m["content"] for m in daemon.replies()] == [ANSWER]  # one message


def test_a_kill_mid_stream_in_the_local_chat_leaves_one_whole_reply(
        tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    with local_daemon(tmp_path, fake_llm) as daemon:
        fake_llm.script_reply(ANSWER, chunk_delay_s=0.2)  # the drive the kill interrupts
        fake_llm.script_reply(ANSWER, chunk_delay_s=CHUNK_DELAY_S)
        asked = daemon.say("an answer the daemon dies writing")
        wait(daemon, lambda: any(m.get("reply_to") == asked and m.get("edited")
                                 for m in daemon.replies()), "the answer to show and grow")
        daemon.kill()
        daemon.start()
        assert daemon.wait_reply(asked, timeout=30)["content"] == ANSWER
        assert [m["content"] for m in daemon.replies()] == [ANSWER]  # one message
