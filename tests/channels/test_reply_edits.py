"""A streamed reply's text edited in place (`ReplyOptions.edit_of`) on Telegram, Slack and
Discord: the real SDKs against the loopback fakes.

A streamed reply is one platform message created when the first text arrives and edited as
the text grows; its final text is an outbox entry like any reply, sent with `edit_of` set to
that message. Each platform's `Rig` says how its fake shows the bot's messages, how a user
deletes one, and which connection a call came on (the adapter's reply client and its
best-effort feedback client have connection pools of their own).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from soulflow.channels.base import ChannelAdapter
from soulflow.channels.discord.format import nonce_for
from soulflow.contracts import Delivery, OutboundMessage, ReplyOptions, SendError
from tests.channels.adapters import (
    discord_adapter,
    slack_adapter,
    telegram_adapter,
    unpaced_discord,
)
from tests.fakes.rate_limits import SLACK_LIMITS, TELEGRAM_LIMITS
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running

USER = 4242  # Telegram private chat
GENERAL = "C0GENERAL1"  # Slack channel of the fake


@dataclass
class Rig:
    """One platform: its started adapter and fake, and what the tests need to ask the fake."""

    platform: str
    adapter: ChannelAdapter
    fake: Any
    chat: str
    shown: Callable[[], list[str]]  # the bot's messages in the chat, as stored (oldest first)
    bold: Callable[[str], bool]  # the bot's last message shows this word bold
    delete: Callable[[str], None]  # a user deletes the bot's message with this id
    # client ports of calls: "post" (any the reply client alone makes), "edit" or "feedback"
    ports: Callable[[str], set[int]]
    fail_edit: Callable[..., None]  # fail_edit(429, retry_after=s) or fail_edit(5xx)
    long_429: float  # a 429 the SDK hands back rather than waits out
    server_error: int
    tagged: Callable[[OutboundMessage], bool]  # the last post carries the outbox id
    exactly_once: bool  # a repeated post of one outbox entry makes no second message
    user_says: Callable[[str], tuple[str, Callable[[], str]]]  # (its id, its text now)

    def out(self, text: str, **options: Any) -> OutboundMessage:
        return OutboundMessage(self.platform, self.chat, text,
                               options=ReplyOptions(**options) if options else ReplyOptions())

    async def post(self, text: str) -> str:
        (sent,) = (await self.adapter.send(self.out(text))).platform_message_ids
        return sent

    async def react(self, message_id: str) -> None:
        emoji = "eyes" if self.platform == "slack" else "👀"
        await self.adapter.add_reaction(self.chat, message_id, emoji)


# -- the rigs ----------------------------------------------------------------------------


@pytest.fixture(params=["telegram", "slack", "discord"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    builder = {"telegram": _telegram, "slack": _slack, "discord": _discord}[request.param]
    async for made in builder(tmp_path):
        yield made


def _ports(calls: list[Any]) -> set[int]:
    return {c.client_port for c in calls if c.client_port is not None}


async def _telegram(tmp_path: Path) -> AsyncIterator[Rig]:
    async with running(FakeTelegram(limits=TELEGRAM_LIMITS.relaxed())) as fake:
        fake.add_chat(USER)
        async with running(telegram_adapter(fake.url, tmp_path)) as adapter:
            def mine() -> list[dict[str, Any]]:
                return [m for (chat, _), m in sorted(fake.messages.items())
                        if chat == USER and m["from"]["id"] == fake.bot_id]

            def bold(word: str) -> bool:
                last = mine()[-1]
                text = last["text"]
                return any(e["type"] == "bold" and text[e["offset"]:e["offset"] + e["length"]]
                           == word for e in last.get("entities", []))

            def delete(message_id: str) -> None:
                del fake.messages[(USER, int(message_id))]
                fake.deleted_messages.append((USER, int(message_id)))

            calls = {"post": ["sendMessage", "getMe", "deleteWebhook"],
                     "edit": ["editMessageText"],
                     "feedback": ["setMessageReaction", "sendChatAction"]}
            yield Rig(
                "telegram", adapter, fake, str(USER), lambda: [m["text"] for m in mine()],
                bold, delete,
                lambda kind: _ports([c for m in calls[kind] for c in fake.calls(m)]),
                lambda status, **kw: fake.fail_next("editMessageText", status, **kw),
                long_429=3.0, server_error=502, tagged=lambda _: False, exactly_once=False,
                user_says=lambda text: _telegram_user(fake, text))


async def _slack(tmp_path: Path) -> AsyncIterator[Rig]:
    async with running(FakeSlack(limits=SLACK_LIMITS.relaxed())) as fake:
        adapter = slack_adapter(fake.base_url, tmp_path, default_channel=GENERAL)
        async with running(adapter):
            def delete(ts: str) -> None:
                (posted,) = [p for p in fake.messages if p.ts == ts]
                fake.history[GENERAL].remove(posted.message)
                posted.deleted = True

            def fail_edit(status: int, retry_after: float | None = None) -> None:
                if status == 429:
                    fake.fail_next("chat.update", retry_after=int(retry_after or 1))
                else:
                    fake.fail_next("chat.update", "internal_error", status=status)

            def tagged(message: OutboundMessage) -> bool:
                metadata = fake.calls("chat.postMessage")[-1].params["metadata"]
                return message.message_id in str(metadata)

            calls = {"post": ["chat.postMessage", "auth.test", "conversations.info",
                              "conversations.history"], "edit": ["chat.update"],
                     "feedback": ["reactions.add"]}
            yield Rig(
                "slack", adapter, fake, GENERAL, lambda: fake.bot_texts(GENERAL),
                lambda word: f"*{word}*" in fake.bot_texts(GENERAL)[-1], delete,
                lambda kind: _ports([c for m in calls[kind] for c in fake.calls(m)]),
                fail_edit, long_429=3.0, server_error=500, tagged=tagged, exactly_once=True,
                user_says=lambda text: _slack_user(fake, text))


async def _discord(tmp_path: Path) -> AsyncIterator[Rig]:
    async with unpaced_discord() as fake, running(discord_adapter(fake, tmp_path)) as adapter:
        channel = fake.channel_ids["general"]

        def mine() -> list[dict[str, Any]]:
            return [m for _, m in sorted(fake.world.messages.items())
                    if int(m["channel_id"]) == channel
                    and int(m["author"]["id"]) == fake.bot_user_id]

        def delete(message_id: str) -> None:
            del fake.world.messages[int(message_id)]

        def fail_edit(status: int, retry_after: float | None = None) -> None:
            fake.fail_next("edit_message", status, retry_after=retry_after)

        names = {"post": {"send_message", "get_messages", "get_channel"},
                 "edit": {"edit_message"},
                 "feedback": {"add_reaction", "typing"}}
        yield Rig(
            "discord", adapter, fake, str(channel), lambda: [m["content"] for m in mine()],
            # Discord renders Markdown itself: the text goes as written
            lambda word: f"**{word}**" in mine()[-1]["content"], delete,
            lambda kind: _ports([r for r in fake.requests if r.name in names[kind]]),
            fail_edit, long_429=45.0, server_error=503,
            tagged=lambda m: fake.sent_messages[-1].payload.get("nonce") == nonce_for(
                m.message_id),
            exactly_once=True, user_says=lambda text: _discord_user(fake, channel, text))


def _telegram_user(fake: FakeTelegram, text: str) -> tuple[str, Callable[[], str]]:
    pushed = fake.push_message(USER, text, from_id=USER)["message"]
    key = (USER, int(pushed["message_id"]))
    return str(key[1]), lambda: str(fake.messages[key]["text"])


def _slack_user(fake: FakeSlack, text: str) -> tuple[str, Callable[[], str]]:
    posted = fake.post_user_message(GENERAL, text)
    return str(posted["ts"]), lambda: str(fake._find(GENERAL, posted["ts"])["text"])


def _discord_user(fake: Any, channel: int, text: str) -> tuple[str, Callable[[], str]]:
    pushed = fake.push_message(channel, text, fake.user_ids["alice"])
    return str(pushed["id"]), lambda: str(fake.world.messages[int(pushed["id"])]["content"])


# -- the behaviour, on every platform ---------------------------------------------------------


async def test_an_edit_replaces_the_text_in_place_formatted_as_a_send(rig: Rig) -> None:
    first = await rig.post("Thinking")
    result = await rig.adapter.send(rig.out("The answer is **bold** and final.",
                                            edit_of=first))
    assert result.platform_message_ids == [first]
    (shown,) = rig.shown()
    assert "The answer is" in shown and "final." in shown and rig.bold("bold")
    if rig.platform == "discord":  # no pings from an edit either
        assert rig.fake.edits[-1].payload["allowed_mentions"] == {"parse": [],
                                                                  "replied_user": True}


async def test_the_same_text_again_is_a_success(rig: Rig) -> None:
    """Telegram answers "message is not modified": the text is there, which is the point."""
    first = await rig.post("Thinking")
    final = rig.out("all **done**", edit_of=first)
    for _ in range(2):
        assert (await rig.adapter.send(final)).platform_message_ids == [first]
    assert len(rig.shown()) == 1 and rig.bold("done")


async def test_an_edit_of_a_deleted_message_posts_the_text_anew(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """A user deleted the streamed message: the final text must not be lost, so it goes as a
    new message (through the send path's exactly-once tag) and its id is returned."""
    first = await rig.post("Thinking")
    rig.delete(first)
    final = rig.out("the **whole** answer", edit_of=first)
    with caplog.at_level(logging.INFO):
        (new,) = (await rig.adapter.send(final)).platform_message_ids
    assert new != first and len(rig.shown()) == 1 and rig.bold("whole")
    assert any(r.levelno == logging.INFO and first in r.getMessage() for r in caplog.records)
    if rig.exactly_once:
        # the daemon died before recording that: the retry edits nothing and posts nothing
        assert rig.tagged(final)
        again = await rig.adapter.send(replace(final, delivery=Delivery(maybe_sent=True)))
        assert again.platform_message_ids == [new] and len(rig.shown()) == 1


async def test_edit_of_someone_elses_message_leaves_it_and_posts_anew(rig: Rig) -> None:
    """An `edit_of` that names a user's message (a bug upstream, or ids mixed up) can never
    put the bot's words into that message: the platform refuses, the text goes out as the
    bot's own new message."""
    their_id, their_text = rig.user_says("my own words")
    (new,) = (await rig.adapter.send(rig.out("the bot's text", edit_of=their_id))
              ).platform_message_ids
    assert new != their_id and their_text() == "my own words"
    assert rig.shown() == ["the bot's text"]


async def test_a_429_on_the_edit_is_a_retry_after_and_the_text_waits(rig: Rig) -> None:
    first = await rig.post("Thinking")
    rig.fail_edit(429, retry_after=rig.long_429)
    final = rig.out("finished", edit_of=first)
    with pytest.raises(SendError) as limited:
        await rig.adapter.send(final)
    assert limited.value.retry_after == rig.long_429 and not limited.value.permanent
    assert rig.shown() == ["Thinking"]
    assert (await rig.adapter.send(final)).platform_message_ids == [first]  # the retry
    assert rig.shown() == ["finished"]


async def test_other_edit_failures_are_classified_as_for_sends(rig: Rig) -> None:
    first = await rig.post("Thinking")
    rig.fail_edit(rig.server_error)
    with pytest.raises(SendError) as outage:
        await rig.adapter.send(rig.out("finished", edit_of=first))
    assert not outage.value.permanent and outage.value.retry_after is None
    with pytest.raises(SendError) as as_file:
        await rig.adapter.send(rig.out("finished", edit_of=first, as_file=True,
                                       filename="a.txt"))
    assert as_file.value.permanent
    with pytest.raises(SendError) as not_an_id:
        await rig.adapter.send(rig.out("finished", edit_of="reaction-or-garbage"))
    assert not_an_id.value.permanent
    assert rig.shown() == ["Thinking"]


async def test_the_edit_goes_on_the_reply_client_and_edit_stays_best_effort(rig: Rig) -> None:
    """The reply client and the feedback client hold connections of their own: an edit of a
    reply comes on the connection replies use, never on feedback's; the status-message
    `edit()` (task progress) still works, on feedback's."""
    first = await rig.post("Thinking")
    await rig.react(first)
    await rig.adapter.send(rig.out("finished", edit_of=first))
    await rig.react(first)
    (edit_port,) = rig.ports("edit")
    assert edit_port in rig.ports("post") and edit_port not in rig.ports("feedback")
    await rig.adapter.edit(rig.chat, first, "status: done")
    assert rig.shown() == ["status: done"]
    assert rig.ports("edit") - {edit_port} <= rig.ports("feedback")


async def test_a_long_stream_of_edits_leaves_one_message_with_the_last_text(rig: Rig) -> None:
    """A slow model streaming a long answer: a hundred edits of one message (limits off in
    these rigs; pacing is the dispatcher's), each growing the text, end as one message."""
    first = await rig.post("w0")
    text = "w0"
    for n in range(1, 101):
        text += f" w{n}"
        ids = (await rig.adapter.send(rig.out(text, edit_of=first))).platform_message_ids
        assert ids == [first]
    assert rig.shown() == [text]


# -- platform specifics ------------------------------------------------------------------


async def test_telegram_flood_control_counts_edits_with_sends(tmp_path: Path) -> None:
    """Telegram paces a chat's edits with its messages (about one a second, short bursts):
    an edit over that budget is a retry-after like a send's."""
    async with running(FakeTelegram()) as fake:
        fake.add_chat(USER)
        async with running(telegram_adapter(fake.url, tmp_path)) as adapter:
            def out(text: str, **options: Any) -> OutboundMessage:
                return OutboundMessage("telegram", str(USER), text,
                                       options=ReplyOptions(**options))

            (first,) = (await adapter.send(out("a"))).platform_message_ids
            refused: SendError | None = None
            for n in range(5):  # a burst of 3 is allowed; the next waits
                try:
                    await adapter.send(out(f"a {'b ' * n}c", edit_of=first))
                except SendError as exc:
                    refused = exc
                    break
            assert refused is not None and refused.retry_after and refused.retry_after >= 1
            assert fake.stats()["rate_limited"] == {"editMessageText": 1}


async def test_telegram_html_it_cannot_parse_is_edited_in_as_plain_text(
        tmp_path: Path) -> None:
    async with running(FakeTelegram(limits=TELEGRAM_LIMITS.relaxed())) as fake:
        fake.add_chat(USER)
        async with running(telegram_adapter(fake.url, tmp_path)) as adapter:
            (first,) = (await adapter.send(OutboundMessage(
                "telegram", str(USER), "draft"))).platform_message_ids
            fake.fail_next("editMessageText", 400,
                           "Bad Request: can't parse entities: unsupported start tag")
            final = OutboundMessage("telegram", str(USER), "a **b**",
                                    options=ReplyOptions(edit_of=first))
            assert (await adapter.send(final)).platform_message_ids == [first]
            edits = fake.calls("editMessageText")
            assert [e.params.get("parse_mode") for e in edits] == ["HTML", None]
            assert fake.messages[(USER, int(first))]["text"] == "a **b**"


async def test_discord_waits_out_a_short_429_on_an_edit_as_on_a_send(tmp_path: Path) -> None:
    async with unpaced_discord() as fake, running(discord_adapter(fake, tmp_path)) as adapter:
        chat = str(fake.channel_ids["general"])
        (first,) = (await adapter.send(OutboundMessage("discord", chat, "draft"))
                    ).platform_message_ids
        fake.fail_next("edit_message", 429, retry_after=0.2)
        final = OutboundMessage("discord", chat, "done", options=ReplyOptions(edit_of=first))
        assert (await adapter.send(final)).platform_message_ids == [first]
        assert [r.status for r in fake.requests if r.name == "edit_message"] == [429, 200]
        assert fake.world.messages[int(first)]["content"] == "done"
