"""The fake Telegram Bot API, driven by the real python-telegram-bot SDK (no mocks).

These tests prove the fake speaks the wire protocol PTB expects, so channel adapters can
later be tested end to end by pointing PTB at ``FakeTelegram`` via ``base_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import struct
import time
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest
from telegram import Bot, BotCommand, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
)
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram, FakeTelegramThread
from tests.running import fake_process, running_fixture

USER_ID = 4242


def tiny_png() -> bytes:
    """A valid 2x1 PNG so sendPhoto passes the fake's image check."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + b"\xff\x00\x00" * 2)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def make_bot(url: str, token: str = DEFAULT_TOKEN) -> Bot:
    return Bot(token, base_url=f"{url}/bot", base_file_url=f"{url}/file/bot")


fake = running_fixture(FakeTelegram)


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with make_bot(fake.url) as real_bot:  # initialize() calls getMe
        yield real_bot


async def first_message_update(bot: Bot, fake: FakeTelegram, text: str = "hello") -> Update:
    fake.push_message(USER_ID, text)
    (update,) = await bot.get_updates()
    await bot.get_updates(offset=update.update_id + 1)
    return update


# -- identity & auth -------------------------------------------------------------------------
async def test_get_me(bot: Bot, fake: FakeTelegram) -> None:
    me = await bot.get_me()
    assert me.is_bot and me.username == "soulflow_test_bot"
    assert me.id == int(DEFAULT_TOKEN.split(":")[0])
    assert [r.method for r in fake.requests] == ["getMe", "getMe"]


@pytest.mark.parametrize("token", ["123456789:wrong-secret", "malformed"])
async def test_wrong_token_is_invalid_token(fake: FakeTelegram, token: str) -> None:
    with pytest.raises(InvalidToken):
        await make_bot(fake.url, token).get_me()


async def test_unknown_method_is_404(bot: Bot) -> None:
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("notARealMethod")


async def test_raw_http_error_shapes(fake: FakeTelegram) -> None:
    async with httpx.AsyncClient(base_url=fake.url) as client:
        unknown = await client.post(f"/bot{DEFAULT_TOKEN}/nope", json={})
        wrong = await client.get("/bot1:bad/getMe")
        upper = await client.get(f"/bot{DEFAULT_TOKEN}/GETME")  # methods are case-insensitive
        fake.push_message(USER_ID, "hi")
        as_json = await client.post(
            f"/bot{DEFAULT_TOKEN}/sendMessage",
            json={"chat_id": USER_ID, "text": "json body", "reply_parameters": {"message_id": 1}},
        )
    assert (unknown.status_code, unknown.json()) == (
        404,
        {"ok": False, "error_code": 404, "description": "Not Found"},
    )
    assert wrong.json() == {"ok": False, "error_code": 401, "description": "Unauthorized"}
    assert upper.json()["result"]["is_bot"] is True
    assert as_json.json()["result"]["reply_to_message"]["text"] == "hi"
    assert [r.method for r in fake.requests][:2] == ["nope", "getMe"]  # rejected ones too


# -- getUpdates ---------------------------------------------------------------------------
async def test_long_poll_returns_as_soon_as_a_message_is_pushed(
    bot: Bot, fake: FakeTelegram
) -> None:
    """A poll that would be held for ten minutes comes back with the pushed message (the
    generous wait below is a tenth of the poll's own timeout)."""
    poll = asyncio.create_task(bot.get_updates(timeout=600, read_timeout=620))
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    fake.push_message(USER_ID, "hi bot", username="alice", first_name="Alice")
    updates = await asyncio.wait_for(poll, 60)
    assert fake.pending_polls == 0
    (update,) = updates
    assert update.message is not None and update.message.text == "hi bot"
    assert update.message.chat.type == "private" and update.message.chat.id == USER_ID
    assert update.message.from_user is not None
    assert update.message.from_user.username == "alice" and not update.message.from_user.is_bot
    assert update.message.date.tzinfo is not None


async def test_long_poll_times_out_with_empty_result(bot: Bot, fake: FakeTelegram) -> None:
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == ()
    assert time.monotonic() - started >= 0.9  # held for its timeout, then answered empty


async def test_offset_confirms_and_limit_caps(bot: Bot, fake: FakeTelegram) -> None:
    for text in ("one", "two", "three"):
        fake.push_message(USER_ID, text)
    first = await bot.get_updates(limit=2)
    assert [u.message.text for u in first if u.message] == ["one", "two"]
    replay = await bot.get_updates()  # nothing confirmed yet: replayed
    assert [u.update_id for u in replay][:2] == [u.update_id for u in first]
    rest = await bot.get_updates(offset=first[-1].update_id + 1)
    assert [u.message.text for u in rest if u.message] == ["three"]
    assert await bot.get_updates(offset=rest[-1].update_id + 1) == ()
    assert fake.pending_updates == []


async def test_allowed_updates_gate_reactions(bot: Bot, fake: FakeTelegram) -> None:
    update = await first_message_update(bot, fake)
    assert update.message is not None
    fake.push_reaction(USER_ID, update.message.message_id, USER_ID, "👍")
    assert await bot.get_updates() == ()  # opt-in kind, not requested: discarded
    fake.push_reaction(USER_ID, update.message.message_id, USER_ID, "🔥")
    (reaction,) = await bot.get_updates(allowed_updates=["message", "message_reaction"])
    assert reaction.message_reaction is not None
    assert [r.emoji for r in reaction.message_reaction.new_reaction] == ["🔥"]  # type: ignore[attr-defined]
    assert [r.emoji for r in reaction.message_reaction.old_reaction] == ["👍"]  # type: ignore[attr-defined]


async def test_second_poller_conflicts_the_first(bot: Bot, fake: FakeTelegram) -> None:
    """Two bot instances polling: the older request gets 409 like on the real API.

    (A single PTB Bot cannot overlap getUpdates: its polling pool has one connection.)
    """
    first = asyncio.create_task(bot.get_updates(timeout=5))
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    async with make_bot(fake.url) as other_instance:
        second = asyncio.create_task(other_instance.get_updates(timeout=5))
        with pytest.raises(Conflict, match="terminated by other getUpdates"):
            await asyncio.wait_for(first, 30)
        fake.push_message(USER_ID, "for the survivor")
        assert len(await asyncio.wait_for(second, 30)) == 1


async def test_conflicts_are_counted_only_when_a_poller_receives_them(
        bot: Bot, fake: FakeTelegram) -> None:
    """`conflicts` counts 409s a poller got (two instances polling at once); a poll its client
    gave up on (connection closed) and that a newer poll then supersedes is no conflict."""
    first = asyncio.create_task(bot.get_updates(timeout=5))
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    async with make_bot(f"{fake.url}/i/other") as other_instance:
        second = asyncio.create_task(other_instance.get_updates(timeout=1))
        with pytest.raises(Conflict):
            await asyncio.wait_for(first, 30)
        await asyncio.wait_for(second, 30)
    assert fake.conflicts == 1 and fake.stats()["conflicts"] == 1
    assert fake.polls_by["other"] == 1 and fake.polls_by[""] == 1

    abandoned = asyncio.create_task(bot.get_updates(timeout=5))
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    abandoned.cancel()  # the client closes its connection; the fake still holds the poll
    with contextlib.suppress(asyncio.CancelledError):
        await abandoned
    assert await bot.get_updates(timeout=0) == ()
    assert fake.conflicts == 1


async def test_dropped_long_poll_surfaces_as_network_error(bot: Bot, fake: FakeTelegram) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=10))
    await fake.wait_for(lambda: fake.pending_polls == 1, timeout=30)
    assert fake.drop_long_polls() == 1
    with pytest.raises(NetworkError):
        await asyncio.wait_for(poll, 30)
    fake.push_message(USER_ID, "after reconnect")
    assert len(await bot.get_updates()) == 1


async def test_webhook_blocks_polling_until_deleted(bot: Bot, fake: FakeTelegram) -> None:
    await bot.set_webhook("https://example.invalid/hook")
    assert (await bot.get_webhook_info()).url == "https://example.invalid/hook"
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates()
    fake.push_message(USER_ID, "queued")
    assert await bot.delete_webhook(drop_pending_updates=True)
    info = await bot.get_webhook_info()
    assert info.url == "" and info.pending_update_count == 0
    assert await bot.get_updates() == ()


async def test_commands_groups_threads_and_replies_parse(bot: Bot, fake: FakeTelegram) -> None:
    group = -1001234567890
    fake.push_message(group, "/ask@soulflow_test_bot what?", from_id=7, chat_type="supergroup")
    first = (await bot.get_updates())[-1].message
    assert first is not None and first.chat.type == "supergroup"
    assert first.entities[0].type == "bot_command" and first.entities[0].offset == 0
    fake.push_message(
        group, "follow-up", from_id=8, chat_type="supergroup", reply_to=first.message_id,
        message_thread_id=99,
    )  # fmt: skip
    reply = (await bot.get_updates())[-1].message
    assert reply is not None and reply.reply_to_message is not None
    assert reply.reply_to_message.message_id == first.message_id
    assert reply.message_thread_id == 99


async def test_malformed_and_unknown_updates(bot: Bot, fake: FakeTelegram) -> None:
    fake.push_raw_update({"update_id": 5, "future_kind": {"x": 1}})
    (update,) = await bot.get_updates()
    assert update.update_id == 5 and update.api_kwargs == {"future_kind": {"x": 1}}
    fake.push_raw_update({"update_id": 6, "message": {"text": "no id, no chat"}})
    with pytest.raises((KeyError, TypeError)):
        await bot.get_updates(offset=6)


# -- sending -------------------------------------------------------------------------------
async def test_send_message_reply_and_thread(bot: Bot, fake: FakeTelegram) -> None:
    update = await first_message_update(bot, fake)
    assert update.message is not None
    sent = await bot.send_message(
        USER_ID, "answer", reply_to_message_id=update.message.message_id, message_thread_id=3
    )
    assert sent.text == "answer" and sent.from_user is not None and sent.from_user.is_bot
    assert sent.reply_to_message is not None
    assert sent.reply_to_message.text == "hello"
    assert sent.message_id == update.message.message_id + 1
    assert fake.sent_texts(USER_ID) == ["answer"]
    params = fake.calls("sendMessage")[0].params
    assert params["reply_parameters"]["message_id"] == update.message.message_id
    assert params["message_thread_id"] == 3 and params["chat_id"] == USER_ID


async def test_send_message_errors(bot: Bot, fake: FakeTelegram) -> None:
    with pytest.raises(BadRequest, match="(?i)chat not found"):
        await bot.send_message(999, "nobody")
    await first_message_update(bot, fake)
    with pytest.raises(BadRequest, match="(?i)message to be replied not found"):
        await bot.send_message(USER_ID, "x", reply_to_message_id=12345)
    with pytest.raises(BadRequest, match="(?i)message is too long"):
        await bot.send_message(USER_ID, "x" * 4097)


async def test_parse_modes(bot: Bot, fake: FakeTelegram) -> None:
    fake.set_limits(fake.limits.relaxed())  # many sends to one chat; pacing is not the point
    await first_message_update(bot, fake)
    html = await bot.send_message(USER_ID, "<b>bold</b> &amp; <a href='https://x.y'>link</a>",
                                  parse_mode=ParseMode.HTML)  # fmt: skip
    assert html.text == "bold & link"
    assert [(e.type, e.offset, e.length) for e in html.entities] == [
        ("bold", 0, 4),
        ("text_link", 7, 4),
    ]
    md = await bot.send_message(USER_ID, "*hi* 🙂 _there_\\.", parse_mode=ParseMode.MARKDOWN_V2)
    assert md.text == "hi 🙂 there."
    assert [(e.type, e.offset) for e in md.entities] == [("bold", 0), ("italic", 6)]  # UTF-16
    with pytest.raises(BadRequest, match="(?i)character '.' is reserved"):
        await bot.send_message(USER_ID, "Done.", parse_mode=ParseMode.MARKDOWN_V2)
    with pytest.raises(BadRequest, match="(?i)can't find end tag"):
        await bot.send_message(USER_ID, "<b>open", parse_mode=ParseMode.HTML)


async def test_edit_message_text(bot: Bot, fake: FakeTelegram) -> None:
    await first_message_update(bot, fake)
    sent = await bot.send_message(USER_ID, "thinking…")
    edited = await bot.edit_message_text("done", chat_id=USER_ID, message_id=sent.message_id)
    assert edited.text == "done" and edited.edit_date is not None  # type: ignore[union-attr]
    assert fake.sent_messages[0]["text"] == "done"
    with pytest.raises(BadRequest, match="(?i)message is not modified"):
        await bot.edit_message_text("done", chat_id=USER_ID, message_id=sent.message_id)


async def test_chat_action_reaction_and_chat_info(bot: Bot, fake: FakeTelegram) -> None:
    update = await first_message_update(bot, fake)
    assert update.message is not None
    assert await bot.send_chat_action(USER_ID, ChatAction.TYPING)
    assert fake.chat_actions == [
        {"chat_id": USER_ID, "action": "typing", "message_thread_id": None}
    ]
    assert await bot.set_message_reaction(USER_ID, update.message.message_id, "👀")
    assert fake.bot_reactions[0]["reaction"] == [{"type": "emoji", "emoji": "👀"}]
    with pytest.raises(BadRequest, match="Reaction_invalid"):
        await bot.set_message_reaction(USER_ID, update.message.message_id, "✅")
    chat = await bot.get_chat(USER_ID)
    assert chat.type == "private" and chat.first_name == f"User{USER_ID}"
    member = await bot.get_chat_member(USER_ID, USER_ID)
    assert member.status == "member" and member.user.id == USER_ID


async def test_commands_round_trip(bot: Bot, fake: FakeTelegram) -> None:
    assert await bot.set_my_commands([BotCommand("ask", "Ask the agent"), ("help", "Help")])
    assert [c.command for c in await bot.get_my_commands()] == ["ask", "help"]
    with pytest.raises(BadRequest, match="(?i)bot_command_invalid"):
        await bot.set_my_commands([BotCommand("Bad-Name", "nope")])
    assert await bot.delete_my_commands()
    assert fake.commands == []


# -- files ---------------------------------------------------------------------------------
async def test_send_document_then_download_it(bot: Bot, fake: FakeTelegram) -> None:
    await first_message_update(bot, fake)
    payload = b"quarterly numbers\n" * 100
    sent = await bot.send_document(USER_ID, payload, filename="report.txt", caption="<i>here</i>",
                                   parse_mode=ParseMode.HTML)  # fmt: skip
    assert sent.document is not None and sent.document.file_name == "report.txt"
    assert sent.caption == "here" and sent.caption_entities[0].type == "italic"
    (upload,) = fake.sent_files
    assert (upload.filename, upload.data, upload.mime_type) == ("report.txt", payload, "text/plain")
    file = await bot.get_file(sent.document.file_id)
    assert file.file_path is not None and file.file_path.startswith(f"{fake.url}/file/bot")
    assert bytes(await file.download_as_bytearray()) == payload


async def test_send_photo_requires_an_image(bot: Bot, fake: FakeTelegram) -> None:
    await first_message_update(bot, fake)
    sent = await bot.send_photo(USER_ID, tiny_png(), caption="pic")
    assert sent.photo[-1].width == 2 and sent.photo[-1].height == 1
    with pytest.raises(BadRequest, match="(?i)image_process_failed"):
        await bot.send_photo(USER_ID, b"not an image")


async def test_user_document_can_be_downloaded(bot: Bot, fake: FakeTelegram) -> None:
    fake.push_message(USER_ID, "see attached", document=("notes.md", b"# notes"))
    (update,) = await bot.get_updates()
    message = update.message
    assert message is not None and message.document is not None and message.caption
    assert message.document.mime_type == "text/markdown"
    file = await bot.get_file(message.document.file_id)
    assert bytes(await file.download_as_bytearray()) == b"# notes"
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("nope")


# -- fault injection -----------------------------------------------------------------------
async def test_429_raises_retry_after(
    bot: Bot, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    await first_message_update(bot, fake)
    fake.fail_next("sendMessage", 429, retry_after=7)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(USER_ID, "too fast")
    assert caught.value.retry_after == dtm.timedelta(seconds=7)
    assert (await bot.send_message(USER_ID, "now ok")).text == "now ok"


async def test_fail_next_count_and_forbidden(bot: Bot, fake: FakeTelegram) -> None:
    await first_message_update(bot, fake)
    fake.fail_next("sendChatAction", 403, count=2)
    for _ in range(2):
        with pytest.raises(Forbidden, match="blocked"):
            await bot.send_chat_action(USER_ID, ChatAction.TYPING)
    assert await bot.send_chat_action(USER_ID, ChatAction.TYPING)


async def test_delay_next(bot: Bot, fake: FakeTelegram) -> None:
    fake.delay_next("getMe", 0.3)
    started = time.monotonic()
    await bot.get_me()
    assert time.monotonic() - started >= 0.3


# -- runners -------------------------------------------------------------------------------
async def test_application_polling_end_to_end(fake: FakeTelegram) -> None:
    """The full PTB Application (Updater + handlers) runs against the fake."""

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

    app = (
        Application.builder()
        .token(DEFAULT_TOKEN)
        .base_url(f"{fake.url}/bot")
        .base_file_url(f"{fake.url}/file/bot")
        .build()
    )
    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=1)
        fake.push_message(USER_ID, "ping")
        await fake.wait_for(lambda: fake.sent_texts() == ["echo: ping"], timeout=5)
        await app.updater.stop()
        await app.stop()
    assert fake.calls("deleteWebhook"), "start_polling clears the webhook first"


def test_thread_runner_serves_a_separate_loop() -> None:
    with FakeTelegramThread() as tg:
        tg.push_message(USER_ID, "from another thread")
        with httpx.Client(base_url=tg.base_url + DEFAULT_TOKEN) as client:
            body = client.post("/getUpdates", data={"timeout": "0"}).json()
            assert body["result"][0]["message"]["text"] == "from another thread"
            client.post("/sendMessage", data={"chat_id": str(USER_ID), "text": "reply"})
        tg.wait_for(lambda: len(tg.fake.sent_messages) == 1, timeout=30)
        assert tg.sent_texts() == ["reply"]
        assert [r.method for r in tg.requests] == ["getUpdates", "sendMessage"]


def test_cli_prints_ready_url() -> None:
    with fake_process("tests.fakes.telegram_api") as url:
        body = httpx.get(f"{url}/bot{DEFAULT_TOKEN}/getMe", timeout=5).json()
        assert body["ok"] and body["result"]["is_bot"]
