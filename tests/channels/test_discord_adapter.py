"""DiscordChannel with the real discord.py client against the loopback fake Discord.

No SDK mocking: the adapter logs in, holds a gateway session and sends over REST to
`FakeDiscord` running in the test's loop. Waits are on conditions with timeouts; heartbeats,
`guild_ready_timeout` and reconnect backoff are small, and the identify pause is skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord.gateway
import discord.http
import pytest

from soulflow.channels.discord.adapter import DiscordChannel, DiscordStartError
from soulflow.channels.discord.format import nonce_for
from soulflow.channels.splitting import split_reply
from soulflow.channels.state import ChannelState
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, ReplyOptions, SendError
from soulflow.conversation.attachments import chat_files
from soulflow.storage.beneath import Beneath
from tests.fakes.discord_api import AttachmentSpec, FakeDiscord
from tests.running import stopped_after

HEARTBEAT_MS = 250
TIMEOUT = 5.0

StartAdapter = Callable[..., Awaitable[DiscordChannel]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS) as server:
        yield server


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "cursors" / "discord.json"


def make_adapter(fake: FakeDiscord, state_path: Path, **overrides: Any) -> DiscordChannel:
    options: dict[str, Any] = {
        "token": fake.token, "state": ChannelState(state_path), "api_url": fake.api_url,
        "gateway_url": fake.gateway_url, "guild_ready_timeout": 0.05, "fast_identify": True,
        "ready_timeout": TIMEOUT, "reconnect_delay_s": 0.05, "send_interval_s": 0.0}
    options.update(overrides)
    return DiscordChannel(**options)


@pytest.fixture
async def start_adapter(fake: FakeDiscord, state_path: Path) -> AsyncIterator[StartAdapter]:
    async with stopped_after(lambda **overrides: make_adapter(fake, state_path, **overrides),
                             DiscordChannel.start, DiscordChannel.stop) as start:
        yield start


@pytest.fixture
async def adapter(start_adapter: StartAdapter) -> DiscordChannel:
    return await start_adapter()


async def receive(adapter: DiscordChannel, count: int = 1) -> list[InboundMessage]:
    """Read until `count` events arrived (fails after TIMEOUT)."""
    received: list[InboundMessage] = []
    async with asyncio.timeout(TIMEOUT):
        while len(received) < count:
            received.extend(await adapter.read())
    return received


async def receive_one(adapter: DiscordChannel) -> InboundMessage:
    (message,) = await receive(adapter)
    return message


def general(fake: FakeDiscord) -> int:
    return fake.channel_ids["general"]


def alice(fake: FakeDiscord) -> int:
    return fake.user_ids["alice"]


def outbound(chat_id: int | str, content: str, **options: Any) -> OutboundMessage:
    return OutboundMessage(provider="discord", chat_id=str(chat_id), content=content, **options)


def reply_messages(adapter: DiscordChannel, chat_id: int | str, text: str,
                   **options: Any) -> list[OutboundMessage]:
    """A reply as the conversation stores it: split once by the adapter's limits, each part an
    outbox message of its own (a file part carries its name and note)."""
    return [outbound(chat_id, part.text, **options, options=part.options)
            for part in split_reply(text, adapter.limits)]


# -- start / stop ------------------------------------------------------------------------


async def test_bad_token_is_one_clear_error(fake: FakeDiscord, state_path: Path) -> None:
    base = discord.http.Route.BASE
    adapter = make_adapter(fake, state_path, token="not-the-token")
    with pytest.raises(DiscordStartError, match=r"rejected DISCORD_BOT_TOKEN \(401\)"):
        await adapter.start()
    assert base == discord.http.Route.BASE
    assert fake.identifies == []


async def test_missing_message_content_intent_is_explained(state_path: Path) -> None:
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS, allowed_intents=0) as fake:
        adapter = make_adapter(fake, state_path)
        with pytest.raises(DiscordStartError, match="Message Content"):
            await adapter.start()


async def test_two_adapters_with_their_own_urls_share_one_process(
        fake: FakeDiscord, tmp_path: Path) -> None:
    """No process-wide patching: discord.py's class-level URLs stay at their defaults while
    two adapters, each pointed at its own Discord, receive and send side by side."""
    before = discord_py_urls()
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS) as other:
        first = make_adapter(fake, tmp_path / "first.json")
        second = make_adapter(other, tmp_path / "second.json")
        await first.start()
        await second.start()
        try:
            assert discord_py_urls() == before
            assert len(fake.identifies) == len(other.identifies) == 1
            assert fake.identifies[0]["intents"] == (1 | 1 << 9 | 1 << 10 | 1 << 12 | 1 << 13
                                                     | 1 << 15)
            fake.push_message(general(fake), "to the first", alice(fake))
            other.push_message(general(other), "to the second", alice(other))
            assert [m.text for m in await receive(first)] == ["to the first"]
            assert [m.text for m in await receive(second)] == ["to the second"]
            await second.send(OutboundMessage("discord", str(general(other)), "from two"))
            await first.send(OutboundMessage("discord", str(general(fake)), "from one"))
            assert [m.content for m in fake.sent_messages] == ["from one"]
            assert [m.content for m in other.sent_messages] == ["from two"]
        finally:
            await first.stop()
            await second.stop()
    assert discord_py_urls() == before


def discord_py_urls() -> tuple[str, object]:
    """discord.py's class-level URLs, which no adapter may change."""
    return discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


async def test_guild_mention_is_stripped_and_flagged(fake: FakeDiscord,
                                                     adapter: DiscordChannel) -> None:
    pushed = fake.push_message(general(fake), f"hello <@!{fake.bot_user_id}> there",
                               alice(fake), mentions_bot=True)
    message = await receive_one(adapter)
    assert (message.provider, message.chat_id, message.message_id) == (
        "discord", str(general(fake)), pushed["id"])
    assert (message.sender_id, message.sender_name) == (str(alice(fake)), "Alice")
    assert message.text == "hello there"
    assert message.is_mention and not message.is_direct and not message.from_bot
    assert message.thread_id is None and message.platform_data["guild_id"] == str(fake.guild_id)


async def test_message_without_mention(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    fake.push_message(general(fake), "just chatting", alice(fake))
    message = await receive_one(adapter)
    assert message.text == "just chatting" and not message.is_mention


async def test_direct_message(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    dm = fake.dm_channel_id(alice(fake))
    fake.push_message(dm, "psst", alice(fake))
    message = await receive_one(adapter)
    assert message.chat_id == str(dm) and message.is_direct and message.is_mention
    assert message.platform_data["guild_id"] is None


def test_each_outbox_record_has_one_nonce_discord_accepts() -> None:
    """The nonce is the record's id when Discord takes it (at most 25 ASCII characters),
    else a digest of it: the same for every try, different for different records."""
    assert nonce_for("out_0123456789abcdef") == "out_0123456789abcdef"
    long_id, odd_id = "x" * 40, "out_é"
    for message_id in (long_id, odd_id):
        nonce = nonce_for(message_id)
        assert len(nonce) <= 25 and nonce.isascii() and nonce == nonce_for(message_id)
    assert nonce_for(long_id) != nonce_for(long_id + "y")


async def test_a_resent_record_returns_the_first_message(fake: FakeDiscord,
                                                         adapter: DiscordChannel) -> None:
    """The same outbox record sent twice (killed after Discord took it): one message."""
    message = outbound(general(fake), "exactly once")
    first = await adapter.send(message)
    again = await adapter.send(message)
    assert again.platform_message_ids == first.platform_message_ids
    assert [m.content for m in fake.sent_messages] == ["exactly once"]
    assert fake.sent_messages[0].payload["nonce"] == message.message_id


async def test_ready_comes_with_the_last_announced_guild_not_after_a_quiet_wait(
        fake: FakeDiscord, start_adapter: StartAdapter) -> None:
    """discord.py waits `guild_ready_timeout` after the last GUILD_CREATE before READY; the
    adapter reads only once ready. The client counts the guilds READY announced instead, so
    with a wait far longer than the start may take, the start still completes, and guild
    messages posted the moment the session opened are read as guild messages: the mention
    rules apply (a message without a mention is not a mention, not a DM)."""
    starting = asyncio.create_task(start_adapter(guild_ready_timeout=600.0))
    await fake.wait_for(lambda: fake.gateway.has_live_session(), TIMEOUT)
    fake.push_message(general(fake), "chatting as it starts", alice(fake))
    fake.push_message(general(fake), "are you there?", alice(fake), mentions_bot=True)
    adapter = await asyncio.wait_for(starting, TIMEOUT)
    plain, mention = await receive(adapter, 2)
    assert not plain.is_direct and not plain.is_mention
    assert not mention.is_direct and mention.is_mention
    assert plain.platform_data["guild_id"] == str(fake.guild_id)


async def test_a_guild_that_never_arrives_still_ends_the_wait(
        fake: FakeDiscord, start_adapter: StartAdapter, monkeypatch: pytest.MonkeyPatch) -> None:
    """READY announces a guild Discord keeps unavailable (an outage): no GUILD_CREATE comes
    for it, and the start ends after `guild_ready_timeout` as discord.py's own wait does."""
    announce = fake.gateway._ready_payload

    def with_an_unavailable_guild(session: Any) -> dict[str, Any]:
        data = announce(session)
        data["guilds"].append({"id": "4200000000000000001", "unavailable": True})
        return data

    monkeypatch.setattr(fake.gateway, "_ready_payload", with_an_unavailable_guild)
    adapter = await start_adapter(guild_ready_timeout=0.3)
    assert adapter._client is not None
    assert adapter._client.expected_guilds.waiting == {4200000000000000001}
    fake.push_message(general(fake), "still answered", alice(fake), mentions_bot=True)
    message = await receive_one(adapter)
    assert message.is_mention and not message.is_direct


async def test_a_guild_message_from_an_uncached_guild_is_not_a_dm(
        fake: FakeDiscord, adapter: DiscordChannel) -> None:
    """A guild the client has not cached (not yet created, or unavailable): discord.py gives
    the message no guild, only the event's guild_id. It is still a guild message."""
    stranger_guild, channel_id = 4_100_000_000_000_001, 4_100_000_000_000_002

    def payload(message_id: int, content: str, mentions: list[int]) -> dict[str, Any]:
        user = {"id": str(alice(fake)), "username": "alice", "discriminator": "0",
                "global_name": "Alice", "avatar": None, "bot": False}
        return {"id": str(message_id), "channel_id": str(channel_id),
                "guild_id": str(stranger_guild), "author": user, "content": content,
                "timestamp": "2026-01-01T00:00:00+00:00", "edited_timestamp": None,
                "tts": False, "mention_everyone": False, "mention_roles": [],
                "mentions": [{"id": str(m), "username": "soulflow-bot", "discriminator": "0",
                              "avatar": None, "bot": True} for m in mentions],
                "attachments": [], "embeds": [], "pinned": False, "type": 0, "flags": 0,
                "components": []}

    fake.push_raw_dispatch("MESSAGE_CREATE", payload(4_100_000_000_000_010, "no ping", []))
    fake.push_raw_dispatch("MESSAGE_CREATE", payload(
        4_100_000_000_000_011, f"<@{fake.bot_user_id}> ping", [fake.bot_user_id]))
    plain, mention = await receive(adapter, 2)
    assert not plain.is_direct and not plain.is_mention
    assert plain.platform_data["guild_id"] == str(stranger_guild)
    assert not mention.is_direct and mention.is_mention and mention.text == "ping"


async def test_other_bots_are_flagged(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    fake.push_message(general(fake), "beep", fake.user_ids["bob"], bot=True)
    assert (await receive_one(adapter)).from_bot


async def test_own_messages_and_reactions_are_not_returned(fake: FakeDiscord,
                                                           adapter: DiscordChannel) -> None:
    result = await adapter.send(outbound(general(fake), "I said this"))
    await adapter.add_reaction(str(general(fake)), result.platform_message_ids[0], "👍")
    fake.push_message(general(fake), "after", alice(fake))
    received = await receive(adapter)  # the echoes came first; only the user's message shows
    assert [m.text for m in received] == ["after"]


async def test_reply_to_bot_message_counts_as_mention(fake: FakeDiscord,
                                                      adapter: DiscordChannel) -> None:
    sent = (await adapter.send(outbound(general(fake), "question?"))).platform_message_ids[0]
    fake.push_message(general(fake), "answer", alice(fake), reply_to=int(sent))
    reply = await receive_one(adapter)
    assert reply.is_mention and reply.platform_data["reply_to_message_id"] == sent

    # a reply with the ping switched off: no mention at all, only the resolved reference
    quiet = fake.world.build_message(fake.world.channels[general(fake)], alice(fake), "quiet",
                                     reply_to=int(sent))
    quiet["mentions"] = []
    fake.push_raw_dispatch("MESSAGE_CREATE", quiet)
    message = await receive_one(adapter)
    assert message.text == "quiet" and message.is_mention


async def test_reply_to_someone_else_is_not_a_mention(fake: FakeDiscord,
                                                      adapter: DiscordChannel) -> None:
    first = fake.push_message(general(fake), "hi", fake.user_ids["bob"])
    fake.push_message(general(fake), "hi bob", alice(fake), reply_to=int(first["id"]))
    _, reply = await receive(adapter, 2)
    assert reply.text == "hi bob" and not reply.is_mention


async def test_raw_reaction_becomes_reaction_event(fake: FakeDiscord,
                                                   adapter: DiscordChannel) -> None:
    sent = (await adapter.send(outbound(general(fake), "rate me"))).platform_message_ids[0]
    fake.push_reaction(general(fake), int(sent), alice(fake), "🔥")
    fake.push_reaction(general(fake), int(sent), alice(fake), "party:123456789012345678")
    fire, custom = await receive(adapter, 2)
    assert (fire.kind, fire.reaction, fire.target_message_id) == ("reaction", "🔥", sent)
    assert fire.message_id == f"reaction-{sent}-{alice(fake)}-🔥"
    assert (fire.chat_id, fire.sender_id) == (str(general(fake)), str(alice(fake)))
    assert fire.is_mention  # a reaction on the bot's own message
    assert custom.reaction == "party"


async def test_attachment_is_described_and_downloaded(fake: FakeDiscord, tmp_path: Path,
                                                      adapter: DiscordChannel) -> None:
    # (the fake's CDN only serves names that need no URL quoting)
    spec = AttachmentSpec("notes_v2.txt", b"attached bytes", "text/plain")
    fake.push_message(general(fake), "see file", alice(fake), attachments=[spec])
    (attachment,) = (await receive_one(adapter)).attachments
    assert (attachment.name, attachment.size, attachment.mime_type) == (
        "notes_v2.txt", 14, "text/plain")
    assert attachment.file_id and attachment.url and attachment.url.startswith(fake.base_url)
    folder = chat_files(Beneath(tmp_path), "discord", str(general(fake)))
    files = tmp_path / "chats" / f"discord-{general(fake)}" / "files"
    rel = await adapter.download(attachment, folder)
    assert tmp_path / rel == files / f"{attachment.file_id}_notes_v2.txt"
    assert (tmp_path / rel).read_bytes() == b"attached bytes"

    hostile = Attachment(name="../../.bash rc", url=attachment.url, file_id="../7")
    rel = await adapter.download(hostile, folder)
    assert tmp_path / rel == files / "_7_bash_rc"


async def test_download_enforces_the_size_cap(fake: FakeDiscord, tmp_path: Path,
                                              start_adapter: StartAdapter) -> None:
    adapter = await start_adapter(max_download_bytes=10)
    url = fake.add_attachment_file("/attachments/1/2/big.bin", b"x" * 11)
    declared = Attachment(name="big.bin", url=url, file_id="2", size=11)
    folder = chat_files(Beneath(tmp_path), "discord", "1")
    with pytest.raises(OSError, match="limit"):
        await adapter.download(declared, folder)
    undeclared = Attachment(name="big.bin", url=url, file_id="2")  # size unknown: counted
    with pytest.raises(OSError, match="limit"):
        await adapter.download(undeclared, folder)
    assert not (tmp_path / "chats").exists()  # nothing written, not even the folder
    missing = Attachment(name="gone.bin", url=f"{fake.base_url}/attachments/0/0/gone.bin")
    with pytest.raises(OSError, match="404"):
        await adapter.download(missing, folder)


# -- outbound ----------------------------------------------------------------------------


async def test_send_plain_text_without_pings(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    text = f"@everyone look, <@{alice(fake)}> and <@&1> **bold**"
    result = await adapter.send(outbound(general(fake), text))
    (sent,) = fake.sent_messages
    assert result.ok and result.platform_message_ids == [str(sent.id)]
    assert sent.content == text and sent.reply_to is None
    assert sent.payload["allowed_mentions"] == {"parse": [], "replied_user": True}


async def test_send_reply_sets_message_reference(fake: FakeDiscord,
                                                 adapter: DiscordChannel) -> None:
    pushed = fake.push_message(general(fake), "question", alice(fake))
    await adapter.send(outbound(general(fake), "answer", reply_to=pushed["id"]))
    sent = fake.sent_messages[-1]
    assert sent.reply_to == int(pushed["id"])
    assert sent.payload["message_reference"]["fail_if_not_exists"] is False
    # a reply to a reaction event answers on the message that was reacted to
    await adapter.send(outbound(general(fake), "noted",
                                reply_to=f"reaction-{pushed['id']}-{alice(fake)}-👍"))
    assert fake.sent_messages[-1].reply_to == int(pushed["id"])


async def test_send_to_a_dm_channel(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    dm = fake.dm_channel_id(alice(fake))
    await adapter.send(outbound(dm, "private answer"))
    assert fake.sent_messages[-1].channel_id == dm


async def test_send_as_file(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    how = ReplyOptions(as_file=True, filename="answer.md", note="Attached.")
    await adapter.send(outbound(general(fake), "# long answer", options=how))
    sent = fake.sent_messages[-1]
    assert sent.content == "Attached."
    assert [(f.filename, f.data) for f in sent.files] == [("answer.md", b"# long answer")]

    huge = "word " * 3000  # over file_fallback_threshold: split into one file part
    (part,) = reply_messages(adapter, general(fake), huge)
    await adapter.send(part)
    assert [(f.filename, f.data) for f in fake.sent_messages[-1].files] == [
        ("reply.txt", huge.encode())]


async def test_long_text_is_split_in_order(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    paragraphs = [f"paragraph {i} " + "x" * 900 for i in range(5)]
    ids = [i for message in reply_messages(adapter, general(fake), "\n\n".join(paragraphs))
           for i in (await adapter.send(message)).platform_message_ids]
    contents = [m.content or "" for m in fake.sent_messages]
    assert len(contents) > 1 and all(len(c) <= 2000 for c in contents)
    assert contents[0].startswith(f"[1/{len(contents)}] ")
    assert [p for p in paragraphs if not any(p in c for c in contents)] == []
    order = [next(i for i, c in enumerate(contents) if p in c) for p in paragraphs]
    assert order == sorted(order)
    assert ids == [str(m.id) for m in fake.sent_messages]


async def test_retry_after_partial_failure_does_not_repeat_parts(
        fake: FakeDiscord, adapter: DiscordChannel) -> None:
    """Each part of a long reply is a message of its own: when the second meets an outage,
    only it is sent again (the dispatcher retries that outbox entry, not the reply)."""
    first, second, third = reply_messages(adapter, general(fake),
                                          "\n\n".join("y" * 1500 for _ in range(3)))
    await adapter.send(first)
    fake.fail_next("send_message", 503)  # the second part hits an outage
    with pytest.raises(SendError) as failed:
        await adapter.send(second)
    assert not failed.value.permanent and len(fake.sent_messages) == 1
    ids = [*(await adapter.send(second)).platform_message_ids,
           *(await adapter.send(third)).platform_message_ids]
    assert [m.content[:5] for m in fake.sent_messages] == ["[1/3]", "[2/3]", "[3/3]"]
    assert ids == [str(m.id) for m in fake.sent_messages[1:]]


async def test_rate_limit_is_waited_out_and_delivered_once(fake: FakeDiscord,
                                                           adapter: DiscordChannel) -> None:
    fake.fail_next("send_message", 429, retry_after=0.2)
    await adapter.send(outbound(general(fake), "patience"))
    assert [r.status for r in fake.requests if r.name == "send_message"] == [429, 200]
    assert [m.content for m in fake.sent_messages] == ["patience"]


async def test_long_rate_limit_becomes_retry_after(fake: FakeDiscord,
                                                   adapter: DiscordChannel) -> None:
    fake.fail_next("send_message", 429, retry_after=45.0)
    with pytest.raises(SendError) as limited:
        await adapter.send(outbound(general(fake), "later"))
    assert limited.value.retry_after == 45.0 and not limited.value.permanent
    assert fake.sent_messages == []


@pytest.mark.parametrize(("status", "permanent"), [(403, True), (400, True), (503, False)])
async def test_send_errors_are_classified(fake: FakeDiscord, adapter: DiscordChannel,
                                          status: int, permanent: bool) -> None:
    fake.fail_next("send_message", status)
    with pytest.raises(SendError) as failed:
        await adapter.send(outbound(general(fake), "hello"))
    assert failed.value.permanent is permanent and str(status) in str(failed.value)


async def test_unknown_or_invalid_channel_is_permanent(adapter: DiscordChannel) -> None:
    with pytest.raises(SendError) as unknown:
        await adapter.send(outbound(12345, "anyone?"))
    assert unknown.value.permanent and "404" in str(unknown.value)
    with pytest.raises(SendError) as invalid:
        await adapter.send(outbound("general", "anyone?"))
    assert invalid.value.permanent


async def test_typing_and_reaction_are_recorded(fake: FakeDiscord,
                                                adapter: DiscordChannel) -> None:
    pushed = fake.push_message(general(fake), "nice", alice(fake))
    await adapter.set_typing(str(general(fake)), True)
    await adapter.set_typing(str(general(fake)), False)  # Discord has no "stop typing"
    await adapter.add_reaction(str(general(fake)), pushed["id"], "👀")
    assert [t.channel_id for t in fake.typing] == [general(fake)]
    assert [(r.message_id, r.emoji) for r in fake.reactions] == [(int(pushed["id"]), "👀")]


async def test_send_before_start_is_a_transient_error(fake: FakeDiscord,
                                                      state_path: Path) -> None:
    adapter = make_adapter(fake, state_path)
    with pytest.raises(SendError) as failed:
        await adapter.send(outbound(general(fake), "too early"))
    assert not failed.value.permanent


# -- staying connected -------------------------------------------------------------------


async def test_malformed_dispatch_does_not_stop_receiving(fake: FakeDiscord,
                                                          adapter: DiscordChannel) -> None:
    fake.push_raw_dispatch("MESSAGE_CREATE", {"channel_id": str(general(fake))})  # no "id"
    fake.push_message(general(fake), "still alive", alice(fake))
    assert (await receive_one(adapter)).text == "still alive"
    await fake.wait_for(lambda: len(fake.identifies) >= 2)  # a fresh client took over
    fake.push_message(general(fake), "and after", alice(fake))
    assert (await receive_one(adapter)).text == "and after"
    await adapter.send(outbound(general(fake), "sending works too"))


@pytest.mark.parametrize("disruption", ["abort", "close-4000", "reconnect"])
async def test_gateway_disruptions_are_survived(fake: FakeDiscord, adapter: DiscordChannel,
                                                disruption: str) -> None:
    if disruption == "reconnect":
        assert fake.send_reconnect() == 1
    else:
        assert fake.drop_connection(None if disruption == "abort" else 4000) == 1
    fake.push_message(general(fake), "while you were away", alice(fake))
    assert (await receive_one(adapter)).text == "while you were away"
    await fake.wait_for(lambda: fake.resumes)
    fake.push_message(general(fake), "after resume", alice(fake))
    assert (await receive_one(adapter)).text == "after resume"


# -- restarts ----------------------------------------------------------------------------


async def test_restart_fetches_what_was_missed_but_not_what_was_handled(
        fake: FakeDiscord, start_adapter: StartAdapter, state_path: Path) -> None:
    dm = fake.dm_channel_id(alice(fake))
    first = await start_adapter()
    fake.push_message(general(fake), "handled", alice(fake))
    fake.push_message(dm, "handled dm", alice(fake))
    first.commit(await receive(first, 2))
    await first.stop()

    fake.push_message(general(fake), "missed 1", alice(fake), mentions_bot=True)
    fake.push_message(general(fake), "missed 2", alice(fake))
    fake.push_message(dm, "missed dm", alice(fake))
    fake.push_message(fake.channel_ids["bot-test"], "missed elsewhere", alice(fake))
    second = await start_adapter()
    received = await receive(second, 4)
    assert sorted(m.text for m in received) == ["missed 1", "missed 2", "missed dm",
                                                "missed elsewhere"]
    by_text = {m.text: m for m in received}
    assert by_text["missed 1"].is_mention and by_text["missed dm"].is_direct
    assert [m.text for m in received if m.chat_id == str(general(fake))] == ["missed 1",
                                                                             "missed 2"]
    second.commit(received)
    await second.stop()  # the cursor file is written off the loop; stop() flushes it
    cursor = ChannelState(state_path).get(f"last:{general(fake)}")
    assert cursor == by_text["missed 2"].message_id


async def test_a_live_message_before_the_catch_up_does_not_hide_what_was_missed(
        fake: FakeDiscord, start_adapter: StartAdapter, state_path: Path) -> None:
    """A new session delivers live messages from its first instant, before the catch-up of
    the time away has run (discord.py dispatches them while it waits for guilds, and before
    the catch-up task gets the loop). Seen in the 2-hour soak as Discord messages lost at each
    restart: the live message moved the channel's cursor past those written meanwhile, and
    the catch-up fetched only what came after it. Here a catch-up still running (holding the
    lock) makes that window as long as the test needs."""
    first = await start_adapter()
    fake.push_message(general(fake), "handled", alice(fake))
    first.commit(await receive(first))
    await first.stop()
    fake.push_message(general(fake), "missed 1", alice(fake))
    fake.push_message(general(fake), "missed 2", alice(fake))

    second = make_adapter(fake, state_path)
    await second._catch_up_lock.acquire()  # an earlier catch-up not finished yet
    try:
        await second.start()
        live = fake.push_message(general(fake), "live", alice(fake))
        client = second._client
        assert client is not None
        await fake.wait_for(lambda: getattr(client.get_channel(general(fake)),
                                            "last_message_id", None) == int(live["id"]))
        second._catch_up_lock.release()
        received = await receive(second, 3)
        # all of them, and each channel in the order its messages were written
        assert [m.text for m in received] == ["missed 1", "missed 2", "live"]
        second.commit(received)
    finally:
        if second._catch_up_lock.locked():
            second._catch_up_lock.release()
        await second.stop()
    assert ChannelState(state_path).get(f"last:{general(fake)}") == received[-1].message_id


async def test_a_catch_up_longer_than_one_page_fetches_every_page(
        fake: FakeDiscord, start_adapter: StartAdapter) -> None:
    """More messages were written while away than one history request returns: every page
    is fetched before the live ones (they used to wait for a reconnect that, with the cursor
    moved on by live traffic, never fetched them)."""
    first = await start_adapter(catch_up_limit=3)
    fake.push_message(general(fake), "handled", alice(fake))
    first.commit(await receive(first))
    await first.stop()
    for n in range(8):
        fake.push_message(general(fake), f"missed {n}", alice(fake))
    second = await start_adapter(catch_up_limit=3)
    received = await receive(second, 8)
    assert [m.text for m in received] == [f"missed {n}" for n in range(8)]


async def test_uncommitted_message_is_delivered_again(fake: FakeDiscord,
                                                      start_adapter: StartAdapter) -> None:
    first = await start_adapter()
    fake.push_message(general(fake), "handled", alice(fake))
    first.commit(await receive(first))
    fake.push_message(general(fake), "read, then crashed", alice(fake))
    lost = await receive_one(first)  # never committed: as if killed before journaling
    await first.stop()
    second = await start_adapter()
    again = await receive_one(second)
    assert (again.key, again.text) == (lost.key, "read, then crashed")


async def test_history_before_the_first_start_is_never_answered(
        fake: FakeDiscord, adapter: DiscordChannel, state_path: Path) -> None:
    await adapter.stop()  # the first run primed every channel at its newest message
    channel = fake.world.channels[general(fake)]
    old = fake.world.build_message(channel, alice(fake), "from before")
    state = ChannelState(state_path)
    assert int(state.get(f"last:{general(fake)}")) < int(old["id"])

    # a fresh install (no cursors) with existing history: nothing old comes back
    fresh = make_adapter(fake, state_path.with_name("fresh.json"))
    await fresh.start()
    try:
        fake.push_message(general(fake), "new", alice(fake))
        assert [m.text for m in await receive(fresh)] == ["new"]
    finally:
        await fresh.stop()
