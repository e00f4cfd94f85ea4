"""TelegramChannel end to end: real python-telegram-bot against the loopback Bot API fake.

Nothing in PTB is mocked; failures are injected at the HTTP level by `FakeTelegram`, so the
adapter sees exactly what a real server would send (401s, 429s, malformed updates, ...).
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from soulflow.channels.base import Command
from soulflow.channels.files import safe_filename
from soulflow.channels.poison import POISON_KIND
from soulflow.channels.splitting import split_reply
from soulflow.channels.state import ChannelState
from soulflow.channels.telegram.adapter import TelegramChannel, TelegramStartError
from soulflow.channels.telegram.format import (
    markdown_to_telegram_html,
    utf16_length,
)
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, ReplyOptions, SendError
from soulflow.conversation.attachments import chat_files
from soulflow.storage.beneath import Beneath
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram
from tests.fakes.telegram_markup import parse_markup
from tests.running import running, running_fixture

USER = 4242
GROUP = -1001234567890
BOT_NAME = "soulflow_test_bot"


fake = running_fixture(FakeTelegram)


@pytest.fixture
def state(tmp_path: Path) -> ChannelState:
    """A state that already has an offset, so reads are live (priming has its own tests)."""
    store = ChannelState(tmp_path / "telegram.json")
    store.set("offset", 1)
    return store


def make_channel(url: str, state: ChannelState, **kwargs: object) -> TelegramChannel:
    options: dict[str, object] = {"token": DEFAULT_TOKEN, "poll_timeout_s": 1,
                                  "retry_delay_s": 0.05, **kwargs}
    return TelegramChannel(api_url=url, state=state, **options)  # type: ignore[arg-type]


@asynccontextmanager
async def channel_on(fake: FakeTelegram, state: ChannelState,
                     **kwargs: object) -> AsyncIterator[TelegramChannel]:
    async with running(make_channel(fake.url, state, **kwargs)) as adapter:
        yield adapter


@pytest.fixture
async def channel(fake: FakeTelegram, state: ChannelState) -> AsyncIterator[TelegramChannel]:
    async with channel_on(fake, state) as adapter:
        yield adapter


async def read_some(channel: TelegramChannel, attempts: int = 5) -> list[InboundMessage]:
    """Pushed updates come back on the first poll; retry a few polls for slack."""
    for _ in range(attempts):
        batch = await channel.read()
        if batch:
            return batch
    return []


def out(text: str, chat: int = USER, **kwargs: Any) -> OutboundMessage:
    return OutboundMessage(provider="telegram", chat_id=str(chat), content=text, **kwargs)


def say(fake: FakeTelegram, text: str, from_id: int = 7, **kwargs: Any) -> dict[str, Any]:
    """A group member writes in GROUP."""
    return fake.push_message(GROUP, text, from_id=from_id, chat_type="supergroup", **kwargs)


# -- start ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("token", "reason"), [
    ("123456789:wrong-token", "401 Unauthorized"), ("no-colon", "404 Not Found"),
    ("", "it is empty")])
async def test_start_rejects_a_bad_token_clearly(fake: FakeTelegram, state: ChannelState,
                                                 token: str, reason: str) -> None:
    adapter = make_channel(fake.url, state, token=token)
    with pytest.raises(TelegramStartError) as caught:
        await adapter.start()
    message = str(caught.value)
    assert reason in message and "@BotFather" in message and "TELEGRAM_BOT_TOKEN" in message
    assert not token or token not in message


async def test_start_reports_an_unreachable_api(state: ChannelState) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = make_channel(f"http://127.0.0.1:{port}", state)
    with pytest.raises(TelegramStartError, match="Cannot reach the Telegram Bot API"):
        await adapter.start()


async def test_start_learns_identity_and_deletes_the_webhook(fake: FakeTelegram,
                                                             state: ChannelState) -> None:
    fake.webhook_url = "https://example.invalid/hook"
    async with channel_on(fake, state) as adapter:
        assert (adapter.bot_id, adapter.bot_username) == (fake.bot_id, BOT_NAME)
        assert fake.webhook_url == "" and fake.calls("deleteWebhook")
        assert adapter.limits.max_text == 4096 and adapter.send_interval_s == 1.0


# -- priming and offsets -------------------------------------------------------------------
async def test_first_batch_ever_is_priming(fake: FakeTelegram, tmp_path: Path) -> None:
    state = ChannelState(tmp_path / "fresh.json")
    fake.push_message(USER, "old one")
    fake.push_message(USER, "old two")
    async with channel_on(fake, state) as adapter:
        history = await adapter.read()
        assert [(m.text, m.priming) for m in history] == [("old one", True), ("old two", True)]
        assert fake.calls("getUpdates")[-1].params["timeout"] == 0  # backlog only, no wait
        adapter.commit(history)
        fake.push_message(USER, "new")
        live = await read_some(adapter)
        assert [(m.text, m.priming) for m in live] == [("new", False)]
        adapter.commit(live)
    async with channel_on(fake, state) as again:
        fake.push_message(USER, "after restart")
        assert [m.priming for m in await read_some(again)] == [False]


async def test_offset_moves_only_on_commit(fake: FakeTelegram, state: ChannelState) -> None:
    adapter = make_channel(fake.url, state)
    await adapter.start()
    first = fake.push_message(USER, "one")
    batch = await read_some(adapter)
    assert state.get("offset") == 1
    adapter.commit(batch)
    assert state.get("offset") == first["update_id"] + 1
    fake.push_message(USER, "two")
    uncommitted = await read_some(adapter)
    assert [m.text for m in uncommitted] == ["two"]
    await adapter.stop()
    assert state.get("offset") == first["update_id"] + 1

    async with channel_on(fake, ChannelState(state.path)) as successor:
        assert [m.text for m in await read_some(successor)] == ["two"]


# -- inbound messages ----------------------------------------------------------------------
async def test_private_message(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.push_message(USER, "hello there", first_name="Ada")
    (message,) = await read_some(channel)
    assert (message.provider, message.chat_id, message.sender_id) == ("telegram", "4242", "4242")
    assert message.message_id == "1" and message.sender_name == "Ada"
    assert message.text == "hello there" and message.kind == "message"
    assert message.is_direct and message.is_mention and not message.from_bot
    assert message.thread_id is None and not message.priming


async def test_group_mentions(fake: FakeTelegram, channel: TelegramChannel) -> None:
    for text in ("just chatting", f"@{BOT_NAME} what is up?", f"tell me, @{BOT_NAME.upper()}",
                 "/help@other_bot", f"/help@{BOT_NAME} me", "/status"):
        say(fake, text)
    batch = await read_some(channel)
    assert [(m.text, m.is_mention, m.is_direct) for m in batch] == [
        ("just chatting", False, False), ("what is up?", True, False),
        (f"tell me, @{BOT_NAME.upper()}", True, False), ("/help@other_bot", False, False),
        (f"/help@{BOT_NAME} me", True, False), ("/status", True, False)]
    assert channel.parse_command(batch[4].text) == Command("help", "me")


async def test_replies_and_reactions_to_the_bot_are_mentions(fake: FakeTelegram,
                                                             channel: TelegramChannel) -> None:
    say(fake, "hi all")
    await read_some(channel)
    bot_message = int((await channel.send(out("I am here", chat=GROUP))).platform_message_ids[0])
    say(fake, "thanks", reply_to=bot_message)
    say(fake, "and to a human", from_id=8, reply_to=1)
    fake.push_reaction(GROUP, bot_message, 7, "🎉")
    fake.push_reaction(GROUP, 1, 8, "🎉")
    assert [(m.kind, m.is_mention) for m in await read_some(channel)] == [
        ("message", True), ("message", False), ("reaction", True), ("reaction", False)]


async def test_forum_topic_sets_thread_id(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.add_chat(GROUP, "supergroup", is_forum=True)
    say(fake, f"@{BOT_NAME} in a topic", message_thread_id=55)
    (message,) = await read_some(channel)
    assert message.thread_id == "55" and message.text == "in a topic"


async def test_own_messages_dropped_other_bots_flagged(fake: FakeTelegram,
                                                      channel: TelegramChannel) -> None:
    say(fake, "echo of myself", from_id=fake.bot_id)
    fake.users[99] = {"id": 99, "is_bot": True, "first_name": "Other", "username": "other_bot"}
    say(fake, f"@{BOT_NAME} hi from a bot", from_id=99)
    (message,) = await read_some(channel)
    assert message.sender_id == "99" and message.from_bot


async def test_anonymous_admin_posts_as_the_group(fake: FakeTelegram,
                                                  channel: TelegramChannel) -> None:
    group = fake.add_chat(GROUP, "supergroup", title="Team")
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group",
                 "username": "GroupAnonymousBot"}
    fake.push_raw_update({"update_id": 300_000_000, "message": {
        "message_id": 1, "date": 0, "chat": group, "from": anonymous, "sender_chat": group,
        "text": f"@{BOT_NAME} status?"}})
    (message,) = await read_some(channel)
    assert (message.sender_id, message.sender_name) == (str(GROUP), "Team")
    assert not message.from_bot and message.is_mention and message.text == "status?"


async def test_reactions(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.push_message(USER, "react to me")
    await read_some(channel)
    fake.push_reaction(USER, 1, USER, "👍")
    fake.push_reaction(USER, 1, USER, ["👍", "🔥"])  # the newly added one counts
    reaction = fake.push_reaction(USER, 1, USER, None)  # removal: ignored
    batch = await read_some(channel)
    assert [(m.kind, m.reaction, m.target_message_id) for m in batch] == [
        ("reaction", "👍", "1"), ("reaction", "🔥", "1")]
    assert batch[1].message_id == f"reaction-{reaction['update_id'] - 1}"
    assert batch[1].text == ""
    assert batch[1].sender_id == str(USER) and batch[1].is_direct
    channel.commit(batch)
    assert channel.state.get("offset") == reaction["update_id"] + 1


async def test_malformed_updates_come_back_as_poison_records(
        fake: FakeTelegram, channel: TelegramChannel, caplog: pytest.LogCaptureFixture) -> None:
    """An update that cannot be read is returned as a poison record (the conversation quarantines
    it in the inbound DLQ before the offset passes it), never dropped silently."""
    fake.push_message(USER, "before")
    fake.push_raw_update({"message": {"text": "no update_id, no chat"}})
    fake.push_raw_update({"update_id": 200_000_000, "message": {"text": "no chat, no id"}})
    fake.push_raw_update({"update_id": 200_000_001, "future_kind": {"x": 1}})
    fake.push_raw_update({"update_id": 200_000_002, "message": "not an object"})
    fake.push_raw_update({"update_id": 200_000_003, "message_reaction": {"chat": {}}})
    fake.push_message(USER, "x" * 1_000_000)
    fake.push_message(USER, "after")
    batch = await read_some(channel)
    assert [m.text for m in batch if m.kind != POISON_KIND] == ["before", "after"]
    assert [m.message_id for m in batch if m.kind == POISON_KIND] == [
        "update-None", "update-200000000", "update-200000002", "update-200000003",
        "update-200000004"]
    assert "quarantined" in caplog.text
    channel.commit(batch)
    fake.push_message(USER, "next")
    assert [m.text for m in await read_some(channel)] == ["next"]  # nothing replayed


async def test_attachments_and_download(fake: FakeTelegram, channel: TelegramChannel,
                                        tmp_path: Path) -> None:
    fake.push_message(USER, "report", document=("../../etc/my report (final).txt", b"data"))
    fake.push_message(USER, None, photo=b"\x89PNG\r\n\x1a\n fake")
    document, photo = await read_some(channel)
    (doc,) = document.attachments
    assert doc.name == "../../etc/my report (final).txt" and doc.size == 4
    assert doc.mime_type == "text/plain" and doc.file_id
    assert photo.text == "" and photo.attachments[0].name == "photo_2.jpg"
    assert photo.attachments[0].file_id == f"user-file-{USER}-2"  # the largest size

    folder = chat_files(Beneath(tmp_path), "telegram", str(USER))
    rel = await channel.download(doc, folder)
    assert rel.parent.as_posix() == f"chats/telegram-{USER}/files"
    assert (tmp_path / rel).read_bytes() == b"data"
    assert rel.name.endswith("_my_report__final_.txt") and not rel.name.startswith(".")
    photo_rel = await channel.download(photo.attachments[0], folder)
    assert (tmp_path / photo_rel).read_bytes() == b"\x89PNG\r\n\x1a\n fake" and photo_rel != rel


async def test_download_refuses_oversize_files(fake: FakeTelegram, state: ChannelState,
                                               tmp_path: Path) -> None:
    async with channel_on(fake, state, max_download_bytes=10) as adapter:
        fake.add_file("big", b"y" * 50, filename="big.bin")
        inbox = chat_files(Beneath(tmp_path), "telegram", str(USER))
        declared = Attachment(name="big.bin", file_id="big", size=50)
        with pytest.raises(OSError, match="big.bin is 50 bytes; the limit is 10 bytes"):
            await adapter.download(declared, inbox)
        assert not fake.calls("getFile")  # refused before asking Telegram
        with pytest.raises(OSError, match="the limit is 10 bytes"):  # size only from getFile
            await adapter.download(Attachment(name="big.bin", file_id="big"), inbox)
        assert not fake.calls("file") and not (tmp_path / "chats").exists()
        with pytest.raises(OSError, match="(?i)invalid file_id"):
            await adapter.download(Attachment(name="x", file_id="missing"), inbox)


# -- sending -------------------------------------------------------------------------------
async def test_send_markdown_as_html_with_reply_and_thread(fake: FakeTelegram,
                                                           channel: TelegramChannel) -> None:
    fake.push_message(USER, "question")
    await read_some(channel)
    result = await channel.send(out("**Bold** & <tags>, `code`", reply_to="1", thread_id="3"))
    (call,) = fake.calls("sendMessage")
    assert call.params["parse_mode"] == "HTML"
    assert call.params["text"] == "<b>Bold</b> &amp; &lt;tags&gt;, <code>code</code>"
    assert call.params["reply_parameters"] == {"message_id": 1,
                                               "allow_sending_without_reply": True}
    assert call.params["message_thread_id"] == 3
    sent = fake.sent_messages[-1]
    assert sent["text"] == "Bold & <tags>, code"
    assert [e["type"] for e in sent["entities"]] == ["bold", "code"]
    assert result.platform_message_ids == [str(sent["message_id"])]
    await channel.send(out("plain text", reply_to="reaction-5"))  # not a message id: no reply
    assert fake.sent_texts()[-1] == "plain text"
    assert "reply_parameters" not in fake.calls("sendMessage")[-1].params


async def test_rejected_markup_falls_back_to_plain_text(fake: FakeTelegram,
                                                        channel: TelegramChannel) -> None:
    fake.add_chat(USER)
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: Unsupported tag")
    result = await channel.send(out("**a** <b>"))
    first, second = fake.calls("sendMessage")
    assert first.params["parse_mode"] == "HTML" and "parse_mode" not in second.params
    assert fake.sent_texts() == ["**a** <b>"] and len(result.platform_message_ids) == 1


async def send_reply(channel: TelegramChannel, text: str) -> list[str]:
    """A reply as the conversation sends it: split once by the adapter's limits, each part a
    message of its own; the platform ids of every part."""
    ids: list[str] = []
    for part in split_reply(text, channel.limits):
        ids += (await channel.send(out(part.text))).platform_message_ids
    return ids


async def test_too_long_text_is_split_in_order(fake: FakeTelegram,
                                               channel: TelegramChannel) -> None:
    fake.add_chat(USER)
    text = "\n\n".join(f"paragraph {i} " + "word " * 150 for i in range(8))
    ids = await send_reply(channel, text)
    texts = fake.sent_texts()
    assert len(ids) == len(texts) >= 2
    assert all(len(t) <= 4096 for t in texts)
    assert texts[0].startswith(f"[1/{len(texts)}] ")
    assert " ".join(t.split(" ", 1)[1] for t in texts).split() == text.split()  # in order


async def test_send_as_file(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.add_chat(USER)
    content = "long answer ✓\n" * 2000
    result = await channel.send(out(content, options=ReplyOptions(
        as_file=True, filename="answer.txt", note="The answer is attached.")))
    (upload,) = fake.sent_files
    assert upload.method == "sendDocument" and upload.filename == "answer.txt"
    assert upload.data == content.encode("utf-8")
    assert fake.sent_messages[-1]["caption"] == "The answer is attached."
    assert result.platform_message_ids == [str(fake.sent_messages[-1]["message_id"])]


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")  # PTB's own
async def test_send_errors_are_classified(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.add_chat(USER)
    fake.fail_next("sendMessage", 429, retry_after=7)
    with pytest.raises(SendError) as flood:
        await channel.send(out("too fast"))
    assert flood.value.retry_after == 7 and not flood.value.permanent
    fake.fail_next("sendMessage", 403)
    with pytest.raises(SendError, match="blocked by the user") as blocked:
        await channel.send(out("anyone?"))
    assert blocked.value.permanent
    with pytest.raises(SendError, match="(?i)chat not found") as missing:
        await channel.send(out("nobody", chat=999))
    assert missing.value.permanent
    fake.fail_next("sendMessage", 502)
    with pytest.raises(SendError, match="Bad Gateway") as gateway:
        await channel.send(out("flaky"))
    assert not gateway.value.permanent and gateway.value.retry_after is None
    for error in (flood, blocked, missing, gateway):
        assert DEFAULT_TOKEN not in str(error.value)


async def test_typing_and_reactions(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.push_message(USER, "hi")
    await read_some(channel)
    await channel.set_typing(str(USER), True)
    await channel.set_typing(str(USER), False)
    assert fake.chat_actions == [{"chat_id": USER, "action": "typing",
                                  "message_thread_id": None}]
    await channel.add_reaction(str(USER), "1", "👀")
    assert fake.bot_reactions[-1]["reaction"] == [{"type": "emoji", "emoji": "👀"}]
    with pytest.raises(SendError, match="(?i)reaction_invalid") as invalid:
        await channel.add_reaction(str(USER), "1", "✅")
    assert invalid.value.permanent
    with pytest.raises(SendError, match="not a Telegram message id"):
        await channel.add_reaction(str(USER), "reaction-9", "👀")


# -- resilience ----------------------------------------------------------------------------
async def test_read_returns_on_stop_without_waiting_out_the_poll(
        fake: FakeTelegram, state: ChannelState) -> None:
    """The long poll would be held for ten minutes: stop() ends the read (the generous wait
    below is a tenth of that). A caller that keeps looping after stop() is slowed by
    retry_delay_s, not spinning."""
    adapter = make_channel(fake.url, state, poll_timeout_s=600, retry_delay_s=0.2)
    await adapter.start()
    reading = asyncio.create_task(adapter.read())
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    await adapter.stop()
    assert await asyncio.wait_for(reading, 60) == []
    started = time.monotonic()
    assert await adapter.read() == []
    assert time.monotonic() - started >= 0.2


async def test_network_errors_back_off_and_recover(fake: FakeTelegram, state: ChannelState,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    async with channel_on(fake, state, poll_timeout_s=5, retry_delay_s=0.1) as adapter:
        reading = asyncio.create_task(adapter.read())
        await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
        fake.drop_long_polls()
        started = time.monotonic()
        assert await asyncio.wait_for(reading, 60) == []
        fake.fail_next("getUpdates", 502, count=2)
        assert await adapter.read() == [] and await adapter.read() == []
        assert time.monotonic() - started >= 0.1 + 0.2 + 0.2  # no hot loop
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING
                  and "polling failed" in r.getMessage()]
        assert len(warned) == 1  # logged once per outage, then at debug level
        fake.webhook_url = "https://example.invalid/hook"  # 409 Conflict: also survived
        assert await adapter.read() == []
        fake.webhook_url = ""
        fake.push_message(USER, "back")
        assert [m.text for m in await read_some(adapter)] == ["back"]


# -- formatting (pure) ---------------------------------------------------------------------
@pytest.mark.parametrize(("markdown", "expected"), [
    ("a & b < c > d", "a &amp; b &lt; c &gt; d"),
    ("**bold** *it* _it_ ~~gone~~", "<b>bold</b> <i>it</i> <i>it</i> <s>gone</s>"),
    ("**bold _and italic_ text**", "<b>bold <i>and italic</i> text</b>"),
    ("***both***", "<b><i>both</i></b>"),
    ("`a < b` and ``x ` y``", "<code>a &lt; b</code> and <code>x ` y</code>"),
    ("`**not bold**`", "<code>**not bold**</code>"),
    ("[docs](https://x.y/a_(b)?q=1&r=2)", '<a href="https://x.y/a_(b)?q=1&amp;r=2">docs</a>'),
    ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
    ("```python\nif a < b:\n    print('**x**')\n```\ndone",
     '<pre><code class="language-python">if a &lt; b:\n    print(\'**x**\')</code></pre>\ndone'),
    ("```\nplain\n```", "<pre>plain</pre>"),
    ("```sh\nunclosed fence", '<pre><code class="language-sh">unclosed fence</code></pre>'),
    ("# Title\n## Learn C#", "<b>Title</b>\n<b>Learn C#</b>"),
    ("- one\n* two\n  + nested", "• one\n• two\n  • nested"),
    ("**unclosed and *stray", "**unclosed and *stray"),
    ("snake_case_name and my_var_", "snake_case_name and my_var_"),
    ("2 * 3 * 4", "2 * 3 * 4"),
    ("**across\nlines**", "**across\nlines**"),
    ("<b>fake tag</b>", "&lt;b&gt;fake tag&lt;/b&gt;"),
])
def test_markdown_to_telegram_html(markdown: str, expected: str) -> None:
    assert markdown_to_telegram_html(markdown) == expected
    parse_markup(expected, "HTML")  # what the fake (like Telegram) accepts


def test_markdown_output_is_always_valid_html() -> None:
    """Random Markdown soup never yields markup Telegram would reject."""
    rng = random.Random(42)
    alphabet = ["*", "**", "_", "__", "~~", "`", "```", "[", "](", "http://a", ")", "<", ">",
                "&", "#", "- ", "\n", " ", "a", "b", "snake_case", "😀"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        parse_markup(markdown_to_telegram_html(text), "HTML")


def test_markdown_conversion_is_linear_on_stray_delimiters() -> None:
    """128,000 unmatched delimiters: a linear converter takes about a second, one that
    backtracks or rescans (quadratic or worse) would take hours. It runs in a process of its
    own so the generous guard can stop a runaway (a regex cannot be interrupted)."""
    code = ("from soulflow.channels.telegram.format import markdown_to_telegram_html as f\n"
            "print(len(f('*x ' * 64000 + '_y ' * 64000)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=90, check=True)
    assert int(done.stdout) >= 6 * 64000


def test_safe_filename() -> None:
    assert safe_filename("../../etc/passwd", "ab12") == "ab12_passwd"
    assert safe_filename("C:\\Users\\me\\résumé 1.pdf", "ab12") == "ab12_r_sum__1.pdf"
    assert safe_filename(".hidden", "ab12") == "ab12_hidden"
    assert safe_filename("", "ab12") == "ab12_file"
    assert safe_filename("...", ".x") == "x_file"
    long_name = safe_filename("a" * 300 + ".tar.gz", "ab12")
    assert len(long_name) == 100 and long_name.endswith(".gz")


async def test_emoji_heavy_text_is_split_by_utf16_units(fake: FakeTelegram,
                                                        channel: TelegramChannel) -> None:
    """Telegram counts 4,096 UTF-16 code units: the adapter's limits say so, and the one split
    (splitting.py) keeps every part under it, though the text has fewer characters."""
    fake.add_chat(USER)
    emoji = "😀 " * 1500  # 3000 characters, 4500 UTF-16 units
    assert [p.text for p in split_reply("short", channel.limits)] == ["short"]
    await send_reply(channel, emoji)
    texts = fake.sent_texts()
    assert len(texts) == 2 and all(utf16_length(t) <= 4096 for t in texts)
    assert " ".join(texts).split() == emoji.split()
