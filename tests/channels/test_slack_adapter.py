"""SlackChannel end to end: the real slack_sdk (Web API + Socket Mode) against FakeSlack.

Nothing in slack_sdk is mocked; the fake speaks Slack's wire protocol on a loopback port.
Tests wait on conditions (the fake's `wait_for`, or reading until a message shows up).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from soulflow.channels.files import safe_filename
from soulflow.channels.slack import resend
from soulflow.channels.slack.adapter import SlackChannel, SlackStartError
from soulflow.channels.slack.format import markdown_to_mrkdwn, slack_to_plain
from soulflow.channels.state import ChannelState
from soulflow.contracts import (
    Attachment,
    Delivery,
    InboundMessage,
    OutboundMessage,
    ReplyOptions,
    SendError,
)
from soulflow.conversation.attachments import chat_files
from soulflow.storage.beneath import Beneath
from tests.fakes.rate_limits import SLACK_LIMITS, Window
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.slack_objects import BOT_ID, BOT_USER_ID
from tests.running import running_fixture

GENERAL = "C0GENERAL1"
HUMAN = "U0HUMAN001"
MENTION = f"<@{BOT_USER_ID}>"

Factory = Callable[..., Awaitable[SlackChannel]]


fake = running_fixture(FakeSlack)


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "cursors" / "slack.json"


@pytest.fixture
async def make(fake: FakeSlack, state_path: Path) -> AsyncIterator[Factory]:
    """Start adapters against the fake (each on a fresh ChannelState of the same file, read
    after the earlier adapters' cursor writes have landed: a restart)."""
    started: list[SlackChannel] = []
    states: list[ChannelState] = []

    async def factory(*, socket: bool = True, start: bool = True, **kwargs: Any) -> SlackChannel:
        for earlier in states:
            earlier.flush()
        states.append(ChannelState(state_path))
        options: dict[str, Any] = {
            "bot_token": BOT_TOKEN, "api_url": fake.base_url, "poll_interval_s": 0.02,
            "state": states[-1], "socket_ping_interval_s": 0.2,
            "app_token": APP_TOKEN if socket else None,
            "default_channel": None if socket else GENERAL}
        adapter = SlackChannel(**{**options, **kwargs})
        started.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in started:
        await adapter.stop()


async def read_until(adapter: SlackChannel, done: Callable[[list[InboundMessage]], bool],
                     reads: int = 20) -> list[InboundMessage]:
    """Read batches until `done(everything so far)`; fail after `reads` reads."""
    got: list[InboundMessage] = []
    for _ in range(reads):
        got += await adapter.read()
        if done(got):
            return got
    raise AssertionError(f"condition not met; read {[m.text for m in got]}")


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def has_text(text: str) -> Callable[[list[InboundMessage]], bool]:
    return lambda got: any(m.text == text for m in got)


# -- start -------------------------------------------------------------------------------

async def test_rejected_bot_token_is_one_clear_error(make: Factory) -> None:
    with pytest.raises(SlackStartError, match=r"Slack rejected SLACK_BOT_TOKEN \(invalid_auth\)"):
        await make(bot_token="xoxb-wrong")


async def test_rejected_app_token_is_one_clear_error(make: Factory) -> None:
    with pytest.raises(SlackStartError, match=r"SLACK_APP_TOKEN \(invalid_auth\)"):
        await make(app_token="xapp-wrong")


async def test_polling_needs_a_readable_default_channel(make: Factory) -> None:
    with pytest.raises(SlackStartError, match="SLACK_DEFAULT_CHANNEL is required when "
                                              "SLACK_APP_TOKEN is not set"):
        await make(socket=False, default_channel=None)
    with pytest.raises(SlackStartError, match="C404 was not found"):
        await make(socket=False, default_channel="C404")


async def test_a_send_before_start_is_retried_not_an_adapter_error(make: Factory) -> None:
    """After a restart the outbox may try a send while the channel is still starting: a
    retryable SendError, as on the other platforms, not an exception from inside the adapter
    (which the dispatcher logs as an adapter bug, with its traceback)."""
    adapter = await make(start=False)
    with pytest.raises(SendError, match="not started") as caught:
        await adapter.send(OutboundMessage("slack", GENERAL, "too early",
                                           delivery=Delivery(maybe_sent=True)))
    assert not caught.value.permanent


# -- polling -----------------------------------------------------------------------------

async def test_polling_primes_then_reads_mentions(make: Factory, fake: FakeSlack) -> None:
    fake.post_user_message(GENERAL, "old one")
    fake.post_user_message(GENERAL, "old two")
    adapter = await make(socket=False)
    primed = await adapter.read()
    assert [m.text for m in primed] == ["old one", "old two"]
    assert all(m.priming for m in primed)
    adapter.commit(primed)
    assert await adapter.read() == []
    fake.add_user("U0ALICE001", "alice")
    posted = fake.post_user_message(GENERAL, f"{MENTION} summarize &amp; go", "U0ALICE001")
    fake.post_user_message(GENERAL, "just chatting")
    mention, chat = await read_until(adapter, lambda got: len(got) == 2)
    assert (mention.text, mention.is_mention, mention.priming) == ("summarize & go", True, False)
    assert mention.message_id == posted["ts"] == mention.platform_data["ts"]
    assert (mention.sender_id, mention.sender_name, mention.thread_id) == ("U0ALICE001",
                                                                          "alice", None)
    assert (chat.text, chat.is_mention, chat.is_direct) == ("just chatting", False, False)


async def test_polling_cursor_moves_only_on_commit(make: Factory, fake: FakeSlack,
                                                   state_path: Path) -> None:
    first = await make(socket=False)
    fake.post_user_message(GENERAL, "before")
    first.commit(await first.read())
    fake.post_user_message(GENERAL, "uncommitted")
    assert [m.text for m in await first.read()] == ["uncommitted"]
    assert await first.read() == []  # not returned twice by the same adapter
    second = await make(socket=False)  # a restart before commit: replayed, not primed
    replay = await second.read()
    assert [(m.text, m.priming) for m in replay] == [("uncommitted", False)]
    second.commit(replay)
    await second.stop()  # the cursor file is written off the loop; stop() flushes it
    assert ChannelState(state_path).get(f"cursor:{GENERAL}") == replay[0].message_id
    third = await make(socket=False)
    assert await third.read() == []


async def test_polling_follows_threads_the_bot_answered(make: Factory, fake: FakeSlack) -> None:
    adapter = await make(socket=False)
    adapter.commit(await adapter.read())
    question = fake.post_user_message(GENERAL, f"{MENTION} help?")
    (inbound,) = await read_until(adapter, lambda got: len(got) == 1)
    adapter.commit([inbound])
    await adapter.send(OutboundMessage("slack", GENERAL, "on it", thread_id=inbound.message_id))
    fake.post_user_message(GENERAL, "thanks, more detail please", thread_ts=question["ts"])
    got = await read_until(adapter, has_text("thanks, more detail please"))
    (reply,) = got
    assert reply.thread_id == question["ts"] and reply.platform_data["bot_thread"]
    adapter.commit(got)
    restarted = await make(socket=False)  # followed threads and their cursors persist
    fake.post_user_message(GENERAL, "second reply", thread_ts=question["ts"])
    assert [m.text for m in await read_until(restarted, has_text("second reply"))] == [
        "second reply"]


async def test_polling_forgets_threads_after_follow_window(make: Factory,
                                                           fake: FakeSlack) -> None:
    adapter = await make(socket=False, thread_follow_s=0.0)
    adapter.commit(await adapter.read())
    parent = fake.post_user_message(GENERAL, "top")
    await adapter.send(OutboundMessage("slack", GENERAL, "answer", thread_id=parent["ts"]))
    fake.post_user_message(GENERAL, "late reply", thread_ts=parent["ts"])
    assert [m.text for m in await adapter.read()] == ["top"]
    assert not fake.calls("conversations.replies")


async def test_rate_limited_polls_wait_out_retry_after_and_lose_nothing(
        make: Factory, fake: FakeSlack) -> None:
    """conversations.history and conversations.replies have tiers of their own; over them
    Slack answers 429 with Retry-After. The fake enforces Tier 3's shape on this test's time
    scale (history 3 reads in any 2 s, replies 2 in any 1 s), so the poller runs into it
    again and again while messages keep arriving in the channel and in a followed thread.
    Every message arrives once, each source in order, and no read method is called again
    before the Retry-After of its last 429 has passed."""
    fake.set_limits(replace(SLACK_LIMITS, per_method={
        **SLACK_LIMITS.per_method, "conversations.history": Window(3, 2.0),
        "conversations.replies": Window(2, 1.0)}))
    adapter = await make(socket=False)
    adapter.commit(await adapter.read())
    question = fake.post_user_message(GENERAL, f"{MENTION} help?")
    (asked,) = await read_until(adapter, lambda got: len(got) == 1)
    adapter.commit([asked])
    await adapter.send(OutboundMessage("slack", GENERAL, "on it", thread_id=asked.message_id))
    got: list[InboundMessage] = []
    for n in range(6):  # posted while the poller is reading, or waiting out a 429
        fake.post_user_message(GENERAL, f"channel {n}")
        fake.post_user_message(GENERAL, f"thread {n}", thread_ts=question["ts"])
        batch = await adapter.read()
        adapter.commit(batch)
        got += batch
    got += await read_until(adapter, lambda more: len(got) + len(more) >= 12, reads=200)
    assert [m.text for m in got if m.thread_id is None] == [f"channel {n}" for n in range(6)]
    assert [m.text for m in got if m.thread_id] == [f"thread {n}" for n in range(6)]
    limited = fake.stats()["rate_limited"]
    assert limited["conversations.history"] >= 1 and limited["conversations.replies"] >= 1
    for method in ("conversations.history", "conversations.replies"):
        calls = fake.calls(method)
        for refused, following in zip(calls, calls[1:], strict=False):
            if refused.status == 429:
                assert refused.retry_after is not None
                assert following.time >= refused.time + refused.retry_after, (method, calls)


async def test_a_shorter_retry_after_does_not_cut_a_longer_one_short(
        make: Factory, fake: FakeSlack) -> None:
    """One poll gets two 429s: history's (its minute is spent: Retry-After 3) and then the
    followed thread's (Retry-After 1). The poller waits for the longer one before it reads
    the history again."""
    fake.set_limits(replace(SLACK_LIMITS, per_method={
        **SLACK_LIMITS.per_method, "conversations.history": Window(1, 3.0)}))
    adapter = await make(socket=False)
    adapter.commit(await adapter.read())  # the priming read spends history's window
    parent = fake.post_user_message(GENERAL, "top")
    await adapter.send(OutboundMessage("slack", GENERAL, "answer", thread_id=parent["ts"]))
    fake.fail_next("conversations.replies", retry_after=1)
    assert await adapter.read() == []  # both refused
    got = await read_until(adapter, has_text("top"))
    assert [m.text for m in got] == ["top"]
    refused, following = fake.calls("conversations.history")[1:3]
    assert (refused.status, refused.retry_after) == (429, 3)
    assert following.time >= refused.time + 3


# -- socket mode -------------------------------------------------------------------------

async def test_socket_events_are_acked_and_mentions_deduped(make: Factory,
                                                            fake: FakeSlack) -> None:
    adapter = await make()
    posted = fake.post_user_message(GENERAL, f"{MENTION} deploy it")
    fake.post_user_message(GENERAL, "sentinel")
    got = await read_until(adapter, has_text("sentinel"))
    assert [m.text for m in got] == ["deploy it", "sentinel"]
    assert got[0].is_mention and got[0].message_id == posted["ts"] and not got[1].is_mention
    await fake.wait_for(lambda: len(fake.acks) == len(fake.envelopes) == 3)


async def test_socket_reconnects_after_disconnect_and_drop(make: Factory,
                                                           fake: FakeSlack) -> None:
    adapter = await make()
    await fake.wait_for(lambda: fake.connection_count == 1)
    assert fake.send_disconnect() == 1
    await fake.wait_for(lambda: fake.socket.hellos == 2 and fake.connection_count == 1)
    fake.post_user_message(GENERAL, "after disconnect")
    await read_until(adapter, has_text("after disconnect"))
    assert fake.drop_sockets() == 1
    await fake.wait_for(lambda: fake.socket.hellos == 3 and fake.connection_count == 1)
    fake.post_user_message(GENERAL, "after drop")
    await read_until(adapter, has_text("after drop"))


async def test_socket_reactions_bots_and_dms(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    await adapter.send(OutboundMessage("slack", GENERAL, "bot speaking"))  # echoed back
    target = fake.messages[0].ts
    fake.add_reaction_event(GENERAL, target, HUMAN, "white_check_mark")
    fake.push_event({"type": "message", "channel": GENERAL, "user": "U0OTHERBOT",
                     "bot_id": "B0OTHER", "text": "other bot", "ts": "1700000000.000001"})
    fake.push_event({"type": "message", "channel": GENERAL, "user": "U0SOMEONE", "bot_id": BOT_ID,
                     "text": "ours, by bot id", "ts": "1700000000.000002"})
    dm = fake.im_channel(HUMAN)
    fake.post_user_message(dm, "private question")
    got = await read_until(adapter, has_text("private question"))
    reaction, other, direct = got
    assert (reaction.kind, reaction.reaction, reaction.target_message_id) == (
        "reaction", "white_check_mark", target)
    assert (reaction.chat_id, reaction.sender_id, reaction.is_mention) == (GENERAL, HUMAN, True)
    assert reaction.message_id.startswith(f"reaction-{target}-{HUMAN}-white_check_mark-")
    assert other.from_bot and other.text == "other bot"
    assert direct.is_direct and direct.is_mention and direct.chat_id == dm
    assert all(m.sender_id != BOT_USER_ID for m in got)


async def test_malformed_events_never_break_read(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    good = {"type": "message", "channel": GENERAL, "user": HUMAN, "ts": "1700000000.000002"}
    bad_events: list[Any] = [
        {"type": "message"}, {"type": "message", "channel": GENERAL, "user": HUMAN},
        dict(good, text="x" * 1_000_000), dict(good, text=["not", "text"]),
        dict(good, files="nope"), {"type": "reaction_added", "user": HUMAN},
        {"type": "unknown_thing"}, dict(good, subtype="message_changed", text="edit")]
    for number, event in enumerate(bad_events):
        fake.push_envelope({"envelope_id": f"event-{number}", "type": "events_api",
                            "payload": {"event": event}})
    for number, payload in enumerate(("just a string", [1, 2], None)):
        fake.push_envelope({"envelope_id": f"payload-{number}", "type": "events_api",
                            "payload": payload})
    fake.push_envelope({"envelope_id": "slash", "type": "slash_commands", "payload": {}})
    fake.post_user_message(GENERAL, "still alive")
    got = await read_until(adapter, has_text("still alive"))
    assert [m.text for m in got] == ["still alive"]
    await fake.wait_for(lambda: len(fake.acks) == len(bad_events) + 5)


# -- send --------------------------------------------------------------------------------

async def test_send_converts_markdown_and_threads(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    parent = fake.post_user_message(GENERAL, "question")
    result = await adapter.send(OutboundMessage(
        "slack", GENERAL, "**Done**: see [the docs](https://x.test/a?b=1&c=2) & <more>",
        reply_to=parent["ts"], options=ReplyOptions(thread_reply=True)))
    (posted,) = fake.messages
    assert posted.text == "*Done*: see <https://x.test/a?b=1&amp;c=2|the docs> &amp; &lt;more&gt;"
    assert posted.thread_ts == parent["ts"] and result.platform_message_ids == [posted.ts]
    assert fake.calls("chat.postMessage")[0].params["unfurl_links"] is False
    await adapter.send(OutboundMessage("slack", GENERAL, "top level", reply_to=parent["ts"]))
    assert fake.messages[1].thread_ts is None


async def test_send_errors_are_classified(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    fake.fail_next("chat.postMessage", retry_after=3)
    with pytest.raises(SendError) as limited:
        await adapter.send(OutboundMessage("slack", GENERAL, "too fast"))
    assert (limited.value.retry_after, limited.value.permanent) == (3.0, False)
    with pytest.raises(SendError) as missing:
        await adapter.send(OutboundMessage("slack", "C404", "nowhere"))
    assert missing.value.permanent and "channel_not_found" in str(missing.value)
    fake.fail_next("chat.postMessage", "internal_error", status=500)
    with pytest.raises(SendError) as server:
        await adapter.send(OutboundMessage("slack", GENERAL, "flaky"))
    assert not server.value.permanent and server.value.retry_after is None


def _reads(fake: FakeSlack) -> int:
    return len(fake.calls("conversations.history") + fake.calls("conversations.replies"))


async def test_a_reply_that_may_have_been_posted_is_found_by_its_id(make: Factory,
                                                                   fake: FakeSlack) -> None:
    """Every post carries the outbox id as metadata. A send the outbox marks as possibly
    done (killed mid-send) reads the channel (or the thread) first and, finding its id, posts
    nothing; the same text under another id is a reply of its own and is posted. An ordinary
    send reads nothing."""
    adapter = await make()
    first = OutboundMessage("slack", GENERAL, "same words")
    sent = await adapter.send(first)
    assert _reads(fake) == 0  # normal running: no extra call
    assert fake.calls("chat.postMessage")[0].params["metadata"] == {
        "event_type": "soulflow_reply", "event_payload": {"id": first.message_id}}
    again = await adapter.send(replace(first, delivery=Delivery(maybe_sent=True)))
    assert again.platform_message_ids == sent.platform_message_ids and len(fake.messages) == 1
    (lookup,) = fake.calls("conversations.history")
    assert lookup.params["include_all_metadata"] in (True, "true", "1")
    other = OutboundMessage("slack", GENERAL, "same words", delivery=Delivery(maybe_sent=True))
    forged = fake.post_user_message(GENERAL, "same words", HUMAN)  # another author's tag
    forged["metadata"] = {"event_type": "soulflow_reply",
                          "event_payload": {"id": other.message_id}}
    await adapter.send(other)
    assert [m.text for m in fake.messages] == ["same words", "same words"]
    parent = fake.post_user_message(GENERAL, "question")
    threaded = OutboundMessage("slack", GENERAL, "in the thread", thread_id=parent["ts"])
    in_thread = await adapter.send(threaded)
    found = await adapter.send(replace(threaded, delivery=Delivery(maybe_sent=True)))
    assert found.platform_message_ids == in_thread.platform_message_ids
    assert len(fake.messages) == 3 and len(fake.calls("conversations.replies")) == 1


async def test_the_look_up_pages_back_to_the_reply(make: Factory, fake: FakeSlack,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages posted after the reply push it off the first page: the look-up follows the
    cursor until it finds it, and reads no further."""
    monkeypatch.setattr(resend, "LOOKUP_PAGE", 2)
    adapter = await make()
    reply = OutboundMessage("slack", GENERAL, "buried")
    sent = await adapter.send(reply)
    for i in range(5):
        fake.post_user_message(GENERAL, f"chatter {i}", HUMAN)
    found = await adapter.send(replace(reply, delivery=Delivery(maybe_sent=True)))
    assert found.platform_message_ids == sent.platform_message_ids and len(fake.messages) == 1
    assert len(fake.calls("conversations.history")) == 3  # 2 + 2 + (chatter 0, buried)


async def test_no_send_before_the_bot_knows_its_own_id(make: Factory, fake: FakeSlack) -> None:
    """After a restart the outbox resends at once, while auth.test may not have answered:
    without the bot's own id no earlier post can be recognised, so the send waits (a
    retryable error) instead of posting the reply a second time."""
    earlier = OutboundMessage("slack", GENERAL, "sent before the kill")
    first = await make()
    await first.send(earlier)
    adapter = await make(start=False)
    fake.delay_next("auth.test", 0.5)
    starting = asyncio.create_task(adapter.start())
    await fake.wait_for(lambda: len(fake.calls("auth.test")) == 2, 5)
    with pytest.raises(SendError, match="not started") as caught:
        await adapter.send(replace(earlier, delivery=Delivery(maybe_sent=True)))
    assert not caught.value.permanent
    await starting
    found = await adapter.send(replace(earlier, delivery=Delivery(maybe_sent=True)))
    assert found.platform_message_ids == [fake.messages[0].ts] and len(fake.messages) == 1


async def test_a_look_up_slack_refuses_now_is_tried_again_before_any_post(
        make: Factory, fake: FakeSlack) -> None:
    """A rate-limited look-up posts nothing and raises for a retry; the retry (the outbox
    no longer marks it in flight) still looks first, then posts once."""
    adapter = await make()
    message = OutboundMessage("slack", GENERAL, "careful", delivery=Delivery(maybe_sent=True))
    fake.fail_next("conversations.history", retry_after=2)
    with pytest.raises(SendError) as limited:
        await adapter.send(message)
    assert limited.value.retry_after == 2.0 and not fake.messages
    await adapter.send(replace(message, delivery=Delivery()))
    assert len(fake.calls("conversations.history")) == 2 and len(fake.messages) == 1
    await adapter.send(OutboundMessage("slack", GENERAL, "next"))
    assert len(fake.calls("conversations.history")) == 2  # settled: no more look-ups


async def test_rejected_text_falls_back_to_plain_parts(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    fake.fail_next("chat.postMessage", "msg_too_long")
    text = "\n\n".join(f"paragraph {i} " + "word " * 100 for i in range(12))
    result = await adapter.send(OutboundMessage("slack", GENERAL, text))
    assert len(result.platform_message_ids) == len(fake.messages) > 1
    assert all(len(m.text) <= 3400 for m in fake.messages)
    fake.fail_next("chat.postMessage", "msg_too_long", count=2)
    with pytest.raises(SendError) as caught:
        await adapter.send(OutboundMessage("slack", GENERAL, "short"))
    assert caught.value.permanent


async def test_send_as_file_uploads_the_text(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    parent = fake.post_user_message(GENERAL, "long answer please")
    result = await adapter.send(OutboundMessage(
        "slack", GENERAL, "x" * 20_000, thread_id=parent["ts"],
        options=ReplyOptions(as_file=True, filename="answer.md", note="It is long.")))
    (upload,) = fake.uploads
    assert (upload.data, upload.filename, upload.initial_comment, upload.thread_ts) == (
        b"x" * 20_000, "answer.md", "It is long.", parent["ts"])
    assert result.platform_message_ids == [upload.file_id]


async def test_add_reaction_and_typing(make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    ts = fake.post_user_message(GENERAL, "seen?")["ts"]
    await adapter.add_reaction(GENERAL, ts, ":eyes:")
    await adapter.add_reaction(GENERAL, ts, "eyes")  # already_reacted is fine
    await adapter.set_typing(GENERAL, True)
    assert fake.channel_history(GENERAL)[0]["reactions"][0]["users"] == [BOT_USER_ID]
    with pytest.raises(SendError):
        await adapter.add_reaction(GENERAL, "1.000001", "eyes")


# -- files -------------------------------------------------------------------------------

async def test_download_with_size_cap(make: Factory, fake: FakeSlack, tmp_path: Path) -> None:
    adapter = await make(max_download_bytes=10)
    fake.post_user_message(GENERAL, "logs", files=[("run log;1.txt", b"boom")])
    fake.post_user_message(GENERAL, "big", files=[("big.bin", b"0123456789abc")])
    small, big = await read_until(adapter, has_text("big"))
    (attachment,) = small.attachments
    assert attachment.file_id and attachment.size == 4 and attachment.mime_type == "text/plain"
    folder = chat_files(Beneath(tmp_path), "slack", GENERAL)
    rel = await adapter.download(attachment, folder)
    assert rel.as_posix() == f"chats/slack-{GENERAL}/files/{attachment.file_id}_run_log_1.txt"
    assert (tmp_path / rel).read_bytes() == b"boom"
    with pytest.raises(OSError, match="limit"):
        await adapter.download(big.attachments[0], folder)
    undeclared = Attachment(name="big.bin", url=big.attachments[0].url, file_id="F1")
    with pytest.raises(OSError, match="limit"):
        await adapter.download(undeclared, folder)
    with pytest.raises(OSError, match="refusing"):
        await adapter.download(Attachment(name="x", url="https://evil.test/x"), folder)
    assert listing(tmp_path / rel.parent) == [rel.name]  # nothing partial left behind


# -- formatting --------------------------------------------------------------------------

@pytest.mark.parametrize(("markdown", "mrkdwn"), [
    ("**bold** and __also__", "*bold* and *also*"),
    ("*italic* and _italic_", "_italic_ and _italic_"),
    ("***both***", "*_both_*"),
    ("~~gone~~", "~gone~"),
    ("## Heading **x**\ntext", "*Heading x*\ntext"),
    ("- one\n* two", "• one\n• two"),
    ("[site](https://a.test/?q=1&r=2)", "<https://a.test/?q=1&amp;r=2|site>"),
    ("[rel](./x.md)", "rel (./x.md)"),
    ("<https://a.test>", "<https://a.test>"),
    ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
    ("<!channel> hi", "&lt;!channel&gt; hi"),
    ("> quoted **x**", "> quoted *x*"),
    ("`**x** <y>`", "`**x** &lt;y&gt;`"),
    ("```python\nif a < b:\n    **x**\n```\nafter", "```\nif a &lt; b:\n    **x**\n```\nafter"),
    ("2*3*4 and snake_case_name", "2*3*4 and snake_case_name"),
])
def test_markdown_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert markdown_to_mrkdwn(markdown) == mrkdwn


def test_slack_to_plain_decodes_inbound_markup() -> None:
    text = "see <https://a.test|docs>, <https://b.test> in <#C1|general> <!here> a &lt; b &amp; c"
    assert slack_to_plain(text) == ("see docs (https://a.test), https://b.test in #general "
                                    "@here a < b & c")


@pytest.mark.parametrize(("name", "expected"), [
    ("../../etc/passwd", "F1_passwd"), (".env", "F1_env"), ("", "F1_file"),
    ("보고서 v2.pdf", "F1_____v2.pdf"), ("a" * 300 + ".txt", "F1_" + "a" * 93 + ".txt"),
])
def test_safe_filename(name: str, expected: str) -> None:
    assert safe_filename(name, "F1") == expected
    assert len(safe_filename(name)) <= 100 and not safe_filename(name).startswith(".")



async def test_a_mention_in_a_thread_carries_the_earlier_thread_messages(
        make: Factory, fake: FakeSlack) -> None:
    adapter = await make()
    parent = fake.post_user_message(GENERAL, "the build is red since noon")
    fake.post_user_message(GENERAL, "it fails in the <https://ci.example/x|lint step>",
                           thread_ts=parent["ts"])
    asked = fake.post_user_message(GENERAL, f"{MENTION} can you look?", thread_ts=parent["ts"])
    got = await read_until(adapter, lambda ms: any(m.message_id == asked["ts"] for m in ms))
    mention = next(m for m in got if m.message_id == asked["ts"])
    context = mention.thread_context
    assert len(context) == 2 and context[0].endswith("the build is red since noon")
    assert "lint step (https://ci.example/x)" in context[1]
    assert all("can you look" not in line for line in context)
