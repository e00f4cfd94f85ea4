"""The REAL discord.py client against the loopback fake Discord (no SDK mocking).

These tests prove the fake speaks enough of REST v10 + the gateway for
discord.py 2.7 to log in, cache the guild, receive events, send/reply/react/type,
upload files, survive 429s and resume after drops.  Waiting is always on events
with timeouts; heartbeats and ``guild_ready_timeout`` are set small for speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import sys
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import discord
import discord.gateway
import discord.http
import pytest

from tests.fakes.discord_api import (
    AttachmentSpec,
    FakeDiscord,
    FakeDiscordThread,
    redirect_discord_py,
)
from tests.running import stopped_after

HEARTBEAT_MS = 250
TIMEOUT = 5.0
REPO_ROOT = Path(__file__).resolve().parents[1]


def default_intents(**overrides: bool) -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = intents.guild_messages = intents.dm_messages = True
    intents.message_content = intents.reactions = True
    for name, value in overrides.items():
        setattr(intents, name, value)
    return intents


class Bot(discord.Client):
    """A plain discord.Client that exposes what it saw as awaitable queues/events."""

    def __init__(self, intents: discord.Intents) -> None:
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.ready_event = asyncio.Event()
        self.resumed_event = asyncio.Event()
        self.messages: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.raw_reactions: asyncio.Queue[discord.RawReactionActionEvent] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Skip discord.py's 5 s courtesy sleep before a non-initial IDENTIFY."""

    async def on_ready(self) -> None:
        self.ready_event.set()

    async def on_resumed(self) -> None:
        self.resumed_event.set()

    async def on_message(self, message: discord.Message) -> None:
        self.messages.put_nowait(message)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        self.raw_reactions.put_nowait(payload)

    async def next_message(self, *, include_own: bool = False) -> discord.Message:
        """Next on_message, skipping the bot's own echoed messages unless asked."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                message = await self.messages.get()
                if include_own or message.author.id != self.user.id:
                    return message

    async def launch(self, token: str) -> None:
        """start() in the background; return once on_ready fired (or re-raise its error)."""
        self.task = asyncio.create_task(self.start(token))
        ready = asyncio.create_task(self.ready_event.wait())
        done, _ = await asyncio.wait(
            {self.task, ready}, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            if self.task.done():
                self.task.result()
            raise TimeoutError("discord.py never became ready")

    async def shutdown(self) -> None:
        await self.close()
        if self.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, TIMEOUT)


StartBot = Callable[..., Awaitable[Bot]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS) as server:
        with redirect_discord_py(server.api_url, server.gateway_url):
            yield server


@pytest.fixture
async def start_bot(fake: FakeDiscord) -> AsyncIterator[StartBot]:
    async with stopped_after(lambda intents=None: Bot(intents or default_intents()),
                             lambda client: client.launch(fake.token),
                             lambda client: client.shutdown()) as start:
        yield start


@pytest.fixture
async def bot(start_bot: StartBot) -> Bot:
    return await start_bot()


def general(fake: FakeDiscord) -> int:
    return fake.channel_ids["general"]


def alice(fake: FakeDiscord) -> int:
    return fake.user_ids["alice"]


# -- login / READY ---------------------------------------------------------------


async def test_login_reaches_ready_with_guild_cached(fake: FakeDiscord, bot: Bot) -> None:
    guild = bot.get_guild(fake.guild_id)
    assert guild is not None and guild.name == "Soulflow Test Guild"
    assert {c.name for c in guild.text_channels} == {"general", "bot-test"}
    assert guild.me is not None and guild.me.id == fake.bot_user_id == bot.user.id
    assert isinstance(bot.get_channel(general(fake)), discord.TextChannel)
    assert fake.identifies[0]["intents"] == default_intents().value
    assert fake.connections[0].query == {"v": "10", "encoding": "json", "compress": "zlib-stream"}
    names = [r.name for r in fake.requests]
    assert names[:2] == ["get_me", "application_info"]
    assert all(r.headers["Authorization"] == f"Bot {fake.token}" for r in fake.requests)


async def test_bad_token_is_a_login_failure(fake: FakeDiscord) -> None:
    client = discord.Client(intents=default_intents())
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
    finally:
        await client.close()
    assert fake.requests[0].status == 401


# -- incoming events -------------------------------------------------------------


async def test_pushed_message_reaches_on_message(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(general(fake), "hello there", alice(fake), mentions_bot=True)
    message = await bot.next_message()
    assert message.content == f"<@{fake.bot_user_id}> hello there"
    assert bot.user in message.mentions
    assert isinstance(message.author, discord.Member) and message.author.name == "alice"
    assert message.channel.id == general(fake) and message.guild.id == fake.guild_id


async def test_message_content_intent_is_enforced(fake: FakeDiscord, start_bot: StartBot) -> None:
    bot = await start_bot(default_intents(message_content=False))
    fake.push_message(general(fake), "secret", alice(fake))
    assert (await bot.next_message()).content == ""
    fake.push_message(general(fake), "ping", alice(fake), mentions_bot=True)
    assert (await bot.next_message()).content.endswith("ping")


async def test_raw_reaction_add(fake: FakeDiscord, bot: Bot) -> None:
    pushed = fake.push_message(general(fake), "react to me", alice(fake))
    await bot.next_message()
    fake.push_reaction(general(fake), int(pushed["id"]), alice(fake), "🔥")
    event = await asyncio.wait_for(bot.raw_reactions.get(), TIMEOUT)
    assert (event.message_id, event.user_id, str(event.emoji)) == (
        int(pushed["id"]),
        alice(fake),
        "🔥",
    )
    assert event.member is not None and event.member.name == "alice"


async def test_incoming_attachment_is_downloadable(fake: FakeDiscord, bot: Bot) -> None:
    spec = AttachmentSpec("notes.txt", b"attached bytes", "text/plain")
    fake.push_message(general(fake), "see file", alice(fake), attachments=[spec])
    attachment = (await bot.next_message()).attachments[0]
    assert (attachment.filename, attachment.size) == ("notes.txt", 14)
    assert await attachment.read() == b"attached bytes"


async def test_reply_from_user_resolves_reference(fake: FakeDiscord, bot: Bot) -> None:
    sent = await bot.get_channel(general(fake)).send("question?")
    fake.push_message(general(fake), "answer", alice(fake), reply_to=sent.id)
    reply = await bot.next_message()
    assert reply.reference is not None and reply.reference.message_id == sent.id
    assert reply.reference.resolved.author.id == bot.user.id
    assert bot.user in reply.mentions  # replies ping the replied-to author by default


async def test_dm_message_and_user_send(fake: FakeDiscord, bot: Bot) -> None:
    dm_id = fake.dm_channel_id(alice(fake))
    fake.push_message(dm_id, "psst", alice(fake))
    message = await bot.next_message()
    assert isinstance(message.channel, discord.DMChannel) and message.guild is None
    user = await bot.fetch_user(alice(fake))
    await user.send("hi alice")
    assert fake.sent_messages[-1].channel_id == dm_id
    assert "create_dm" in [r.name for r in fake.requests]


# -- outgoing REST -------------------------------------------------------------


async def test_send_reply_and_edit_are_recorded(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(general(fake))
    sent = await channel.send("hi all")
    assert fake.sent_messages[-1].content == "hi all" and fake.sent_messages[-1].id == sent.id
    echoed = await bot.next_message(include_own=True)  # Discord echoes the bot's own messages
    assert echoed.id == sent.id and echoed.author.id == bot.user.id

    fake.push_message(general(fake), "question", alice(fake))
    incoming = await bot.next_message()
    reply = await incoming.reply("answer")
    assert fake.sent_messages[-1].reply_to == incoming.id
    assert reply.reference is not None and reply.reference.message_id == incoming.id

    edited = await reply.edit(content="better answer")
    assert edited.content == "better answer" and fake.edits[-1].message_id == reply.id


async def test_fetch_history_guild_member_and_delete(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(general(fake))
    first = await channel.send("one")
    second = await channel.send("two")
    assert [m.id async for m in channel.history(limit=10)] == [second.id, first.id]
    assert (await channel.fetch_message(first.id)).content == "one"
    guild = await bot.fetch_guild(fake.guild_id)
    assert guild.name == "Soulflow Test Guild" and guild.approximate_member_count == 3
    assert (await guild.fetch_member(alice(fake))).name == "alice"
    await first.delete()
    assert fake.deleted == [(general(fake), first.id)]
    with pytest.raises(discord.NotFound):
        await channel.fetch_message(first.id)


async def test_add_reaction_recorded(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(general(fake), "nice", alice(fake))
    message = await bot.next_message()
    await message.add_reaction("👍")
    assert [(r.message_id, r.emoji) for r in fake.reactions] == [(message.id, "👍")]


async def test_typing_recorded(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(general(fake))
    async with channel.typing():
        pass
    fake.delay_next("POST /channels/*/typing", 0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await channel.typing()
    assert loop.time() - started >= 0.1
    assert [t.channel_id for t in fake.typing] == [general(fake)] * 2


async def test_file_send_recorded_and_served(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(general(fake))
    upload = discord.File(io.BytesIO(b"%PDF-fake"), filename="report.pdf")
    sent = await channel.send("here you go", file=upload)
    record = fake.sent_messages[-1]
    assert record.content == "here you go"
    assert [(f.field_name, f.filename, f.data) for f in record.files] == [
        ("files[0]", "report.pdf", b"%PDF-fake")
    ]
    assert sent.attachments[0].filename == "report.pdf"
    assert await sent.attachments[0].read() == b"%PDF-fake"


async def test_enforced_nonce_returns_the_first_message_within_the_window(
        fake: FakeDiscord, bot: Bot) -> None:
    """Discord: with `enforce_nonce`, a create whose nonce the same author used in the same
    channel within the past few minutes returns that message and creates none. discord.py
    sends `enforce_nonce: true` with every nonce."""
    now = [1000.0]
    fake.nonces.clock = lambda: now[0]
    channel = bot.get_channel(general(fake))
    first = await channel.send("once", nonce="out_0123456789abcdef")
    again = await channel.send("once", nonce="out_0123456789abcdef")
    assert again.id == first.id and [m.id for m in fake.sent_messages] == [first.id]
    assert fake.requests[-1].json["enforce_nonce"] is True and fake.nonces.hits == 1
    other = await bot.get_channel(fake.channel_ids["bot-test"]).send("once",
                                                                    nonce="out_0123456789abcdef")
    assert other.id != first.id  # another channel: a message of its own
    now[0] += fake.nonces.window_s + 1
    late = await channel.send("once", nonce="out_0123456789abcdef")
    assert late.id not in (first.id, other.id) and len(fake.sent_messages) == 3
    with pytest.raises(discord.HTTPException) as refused:
        await channel.send("x", nonce="n" * 26)
    assert refused.value.status == 400 and len(fake.sent_messages) == 3


async def test_rate_limit_429_is_retried_once(fake: FakeDiscord, bot: Bot) -> None:
    fake.fail_next("send_message", 429, retry_after=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    sent = await bot.get_channel(general(fake)).send("patience")
    assert loop.time() - started >= 0.3
    posts = [r.status for r in fake.requests if r.name == "send_message"]
    assert posts == [429, 200]
    assert [m.id for m in fake.sent_messages] == [sent.id]


async def test_rest_errors_have_discord_shape(fake: FakeDiscord, bot: Bot) -> None:
    with pytest.raises(discord.NotFound) as missing:
        await bot.fetch_channel(12345)
    assert missing.value.code == 10003
    with pytest.raises(discord.HTTPException) as too_long:
        await bot.get_channel(general(fake)).send("x" * 2001)
    assert too_long.value.status == 400 and too_long.value.code == 50035
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{fake.api_url}/no/such/route") as resp:
            assert resp.status == 404
            assert await resp.json() == {"message": "404: Not Found", "code": 0}
        async with session.get(f"{fake.api_url}/users/@me") as resp:
            assert resp.status == 401 and (await resp.json())["code"] == 0
        async with session.post(f"{fake.api_url}/users/@me") as resp:
            assert resp.status == 405


# -- gateway lifecycle ---------------------------------------------------------


@pytest.mark.parametrize("close_code", [None, 4000], ids=["abort", "close-4000"])
async def test_drop_connection_resumes_and_replays(
    fake: FakeDiscord, bot: Bot, close_code: int | None
) -> None:
    assert fake.drop_connection(close_code) == 1
    fake.push_message(general(fake), "while you were away", alice(fake))
    await asyncio.wait_for(bot.resumed_event.wait(), TIMEOUT)
    assert (await bot.next_message()).content == "while you were away"
    assert len(fake.identifies) == 1 and len(fake.resumes) == 1
    fake.push_message(general(fake), "after resume", alice(fake))
    assert (await bot.next_message()).content == "after resume"


async def test_server_reconnect_resumes_on_resume_url(fake: FakeDiscord, bot: Bot) -> None:
    assert fake.send_reconnect() == 1
    await asyncio.wait_for(bot.resumed_event.wait(), TIMEOUT)
    assert fake.resumes[0]["session_id"] in fake.gateway.sessions
    assert fake.connections[-1].path == "/gateway/resume" and len(fake.identifies) == 1
    fake.push_message(general(fake), "still here", alice(fake))
    assert (await bot.next_message()).content == "still here"


async def test_invalid_session_makes_client_identify_again(fake: FakeDiscord, bot: Bot) -> None:
    bot.ready_event.clear()
    assert fake.invalidate_session(resumable=False) == 1
    await asyncio.wait_for(bot.ready_event.wait(), TIMEOUT)
    assert len(fake.identifies) == 2 and fake.connections[-1].path == "/gateway"
    fake.push_message(general(fake), "fresh session", alice(fake))
    assert (await bot.next_message()).content == "fresh session"


async def test_heartbeats_are_acked(fake: FakeDiscord, bot: Bot) -> None:
    before = fake.gateway.heartbeats
    fake.request_heartbeat()  # op 1 from the server forces an immediate heartbeat
    await fake.wait_for(lambda: fake.gateway.heartbeats > before, TIMEOUT)
    # discord.py measures latency from a heartbeat to its ACK: infinite until one is acked
    await fake.wait_for(lambda: math.isfinite(bot.latency), TIMEOUT)


async def test_unknown_or_lenient_dispatches_do_not_kill_client(
    fake: FakeDiscord, bot: Bot
) -> None:
    fake.push_raw_dispatch("SOMETHING_DISCORD_ADDED_LATER", {"x": [1, 2]})
    fake.push_raw_dispatch(
        "MESSAGE_CREATE",
        {  # minimal fields, channel the bot can't see
            "id": "1",
            "channel_id": "999",
            "guild_id": str(fake.guild_id),
            "type": 0,
            "content": "bare",
            "author": {
                "id": str(alice(fake)),
                "username": "alice",
                "discriminator": "0",
                "avatar": None,
            },
        },
    )
    bare = await bot.next_message()
    assert bare.content == "bare" and isinstance(bare.channel, discord.PartialMessageable)
    fake.push_message(general(fake), "still alive", alice(fake))
    assert (await bot.next_message()).content == "still alive"
    assert not bot.task.done()


async def test_malformed_known_dispatch_escapes_discord_py(fake: FakeDiscord, bot: Bot) -> None:
    """Finding: discord.py 2.7 does not guard its parsers; the adapter must supervise start()."""
    fake.push_raw_dispatch("MESSAGE_CREATE", {"channel_id": str(general(fake))})
    with pytest.raises(KeyError):
        await asyncio.wait_for(bot.task, TIMEOUT)


async def test_members_intent_triggers_chunking(fake: FakeDiscord, start_bot: StartBot) -> None:
    bot = await start_bot(default_intents(members=True))
    guild = bot.get_guild(fake.guild_id)
    assert guild.chunked and {m.name for m in guild.members} == {"soulflow-bot", "alice", "bob"}
    assert len(fake.gateway.member_requests) == 1


# -- raw protocol details ----------------------------------------------------------


async def test_raw_gateway_sequence_compression_and_close_codes(fake: FakeDiscord) -> None:
    inflate = zlib.decompressobj()
    async with aiohttp.ClientSession() as session:
        url = f"{fake.gateway_url}?v=10&encoding=json&compress=zlib-stream"
        async with session.ws_connect(url) as ws:

            async def receive() -> dict:
                data = await ws.receive_bytes(timeout=TIMEOUT)
                assert data.endswith(b"\x00\x00\xff\xff")
                return json.loads(inflate.decompress(data))

            assert (await receive())["d"] == {"heartbeat_interval": HEARTBEAT_MS}
            await ws.send_json(
                {"op": 2, "d": {"token": fake.token, "intents": 1 | 1 << 9, "properties": {}}}
            )
            assert [(f["t"], f["s"]) for f in [await receive(), await receive()]] == [
                ("READY", 1),
                ("GUILD_CREATE", 2),
            ]
            await ws.send_json({"op": 1, "d": 2})
            assert (await receive())["op"] == 11
            fake.push_message(general(fake), "raw", alice(fake))
            frame = await receive()
            assert (frame["t"], frame["s"], frame["d"]["content"]) == ("MESSAGE_CREATE", 3, "")
        async with session.ws_connect(fake.gateway_url) as ws:  # no compress: text frames
            assert (await ws.receive_json(timeout=TIMEOUT))["op"] == 10
            await ws.send_json({"op": 2, "d": {"token": "wrong", "intents": 1}})
            await ws.receive(timeout=TIMEOUT)
            assert ws.close_code == 4004
        async with session.ws_connect(fake.gateway_url) as ws:
            await ws.receive_json(timeout=TIMEOUT)
            await ws.send_json({"op": 3, "d": {}})
            await ws.receive(timeout=TIMEOUT)
            assert ws.close_code == 4003


def test_redirect_restores_class_attributes() -> None:
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    with redirect_discord_py("http://127.0.0.1:1/api/v10", "ws://127.0.0.1:1/gateway"):
        assert discord.http.Route("GET", "/x").url == "http://127.0.0.1:1/api/v10/x"
    assert base == discord.http.Route.BASE
    assert gateway == discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


# -- runners ------------------------------------------------------------------------


async def test_thread_runner_serves_a_real_client() -> None:
    with (
        FakeDiscordThread(heartbeat_interval_ms=HEARTBEAT_MS) as runner,
        redirect_discord_py(runner.api_url, runner.gateway_url),
    ):
        client = Bot(default_intents())
        try:
            await client.launch(runner.token)
            runner.push_message(
                runner.channel_ids["general"], "from thread", runner.user_ids["alice"]
            )
            assert (await client.next_message()).content == "from thread"
            await client.get_channel(runner.channel_ids["general"]).send("back")
            sent = await asyncio.to_thread(runner.wait_for, lambda: runner.fake.sent_messages)
            assert sent[0].content == "back" and runner.sent_messages[0].content == "back"
        finally:
            await client.shutdown()


async def test_cli_prints_ready_and_serves() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.discord_api",
        "--port",
        "0",
        "--token",
        "cli-token",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)).decode().split()
        assert line[0] == "READY" and line[1].endswith("/api/v10")
        api_url, gateway_url = line[1], line[2]
        async with aiohttp.ClientSession(headers={"Authorization": "Bot cli-token"}) as session:
            async with session.get(f"{api_url}/gateway/bot") as resp:
                assert (await resp.json())["url"] == gateway_url
            control = api_url.replace("/api/v10", "/_fake")
            async with session.get(f"{control}/state") as resp:
                assert (await resp.json())["connected"] is False
            fault = {"route": "get_bot_gateway", "status": 503}
            async with session.post(f"{control}/fail_next", json=fault) as resp:
                assert resp.status == 200
            async with session.get(f"{api_url}/gateway/bot") as resp:
                assert resp.status == 503 and (await resp.json())["code"] == 0
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), TIMEOUT)
