"""Helpers for the Discord adapter that hold none of its state: translations, rules, REST.

Kept apart from the adapter (which owns the connection, queue and cursors) so the rules --
what counts as a mention, which errors are permanent, how a downloaded file is named, which
channels get a cursor -- read in one place.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
import discord.abc
from discord.http import handle_message_parameters

from soulflow.channels.discord.guilds import ExpectedGuilds
from soulflow.channels.discord.http import route_client
from soulflow.channels.files import safe_filename
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, SendError

PROVIDER = "discord"
# Only what a person writes: joins, pins, thread announcements etc. are not messages to answer.
_CONVERSATION_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_REACTION_ID = re.compile(r"^reaction-(\d+)-")
_DOWNLOAD_CHUNK = 64 * 1024
# Model text must not ping @everyone, roles or arbitrary users; the person replied to is pinged
# as in any Discord reply.
ALLOWED_MENTIONS = discord.AllowedMentions(everyone=False, users=False, roles=False,
                                           replied_user=True)
# What a REST call may raise; RuntimeError covers a send racing a client being replaced.
SEND_FAILURES = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError,
                 RuntimeError)


# -- connecting --------------------------------------------------------------------------


def intents() -> discord.Intents:
    """Messages (with content) and reactions in guilds and DMs; no members or presences."""
    wanted = discord.Intents.none()
    wanted.guilds = wanted.guild_messages = wanted.dm_messages = True
    wanted.message_content = wanted.guild_reactions = wanted.dm_reactions = True
    return wanted


@dataclass(frozen=True, slots=True)
class ClientEvents:
    """Where an `EventClient` delivers what the adapter listens to."""

    identifying: Callable[[], None]  # a new session, before any of its events
    ready: Callable[[discord.Client], None]
    message: Callable[[discord.Client, discord.Message], None]
    reaction: Callable[[discord.Client, discord.RawReactionActionEvent], None]


class EventClient(discord.Client):
    """A discord.Client that forwards READY, messages and added reactions to callbacks, and
    becomes ready as soon as every guild READY announced has arrived (`ExpectedGuilds`)."""

    def __init__(self, events: ClientEvents, *, api_url: str, gateway_url: str | None = None,
                 fast_identify: bool = False, max_ratelimit_timeout: float | None = None,
                 guild_ready_timeout: float = 2.0, **options: Any) -> None:
        super().__init__(intents=intents(), guild_ready_timeout=guild_ready_timeout, **options)
        route_client(self, api_url=api_url, gateway_url=gateway_url,
                     max_ratelimit_timeout=max_ratelimit_timeout)
        self._events = events
        self._fast_identify = fast_identify
        self.expected_guilds = ExpectedGuilds(self._connection, guild_ready_timeout)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # The 5 s pause before a re-IDENTIFY respects Discord's identify rate limit: production
        # keeps it, tests skip it.
        if not self._fast_identify:
            await super().before_identify_hook(shard_id, initial=initial)
        self._events.identifying()  # (a RESUME replays what was missed: no hook, no catch-up)

    async def on_ready(self) -> None:
        self._events.ready(self)

    async def on_message(self, message: discord.Message) -> None:
        self._events.message(self, message)

    async def on_raw_reaction_add(self, event: discord.RawReactionActionEvent) -> None:
        self._events.reaction(self, event)


def explain_start_failure(error: BaseException) -> str:
    """One sentence an operator can act on, for a gateway failure before the first READY."""
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return ("Discord refused the Message Content intent (4014); enable 'Message Content "
                "Intent' under Bot > Privileged Gateway Intents in the Developer Portal.")
    if isinstance(error, discord.ConnectionClosed) and error.code == 4004:
        return "Discord's gateway rejected DISCORD_BOT_TOKEN (4004); reset the bot token."
    return f"The Discord gateway failed before it was ready: {type(error).__name__}: {error}"


# -- inbound -----------------------------------------------------------------------------


def strip_bot_mention(text: str, bot_id: int) -> str:
    """Remove `<@ID>` / `<@!ID>` of the bot: the agent should see the request, not the ping."""
    stripped = re.sub(rf"<@!?{bot_id}>", "", text)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()


def replies_to_bot(message: discord.Message, bot_id: int) -> bool:
    """True when the message is a reply to one of the bot's messages.

    Discord includes the referenced message in the event (`resolved`); when it does not, the
    client's message cache may still hold it. Without either we cannot tell, so False.
    """
    reference = message.reference
    if reference is None:
        return False
    target = reference.resolved
    if not isinstance(target, discord.Message):
        target = reference.cached_message
    return target is not None and target.author.id == bot_id


def _mentions_bot(message: discord.Message, bot_id: int) -> bool:
    return bot_id in message.raw_mentions or any(u.id == bot_id for u in message.mentions)


def _attachment(item: discord.Attachment) -> Attachment:
    return Attachment(name=item.filename, url=item.url, file_id=str(item.id),
                      mime_type=item.content_type, size=item.size)


def guild_id_of(message: discord.Message) -> int | None:
    """The guild a message was posted in; None for a DM. Read from the event itself, not
    from the client's guild cache: a guild message that arrives before its guild is cached
    (right after a start, or while Discord has the guild unavailable) gets a channel that
    knows only the event's `guild_id`, and `message.guild` is None there. Taking that as a
    DM would answer a guild message without a mention and load the DM's private zone."""
    if message.guild is not None:
        return message.guild.id
    guild_id = getattr(message.channel, "guild_id", None)
    return guild_id if isinstance(guild_id, int) else None


def inbound_from_message(message: discord.Message, bot_id: int) -> InboundMessage | None:
    """The bus record for a user's message; None for the bot's own and for system messages.

    Threads are channels in Discord, so `chat_id` is the thread's id and `thread_id` stays
    None: replying to the chat id lands in the thread.
    """
    if message.author.id == bot_id or message.type not in _CONVERSATION_TYPES:
        return None
    guild_id = guild_id_of(message)
    is_direct = guild_id is None
    reference = message.reference
    return InboundMessage(
        provider=PROVIDER,
        chat_id=str(message.channel.id),
        message_id=str(message.id),
        sender_id=str(message.author.id),
        sender_name=message.author.display_name,
        text=strip_bot_mention(message.content, bot_id),
        is_direct=is_direct,
        is_mention=(is_direct or _mentions_bot(message, bot_id)
                    or replies_to_bot(message, bot_id)),
        from_bot=message.author.bot,
        attachments=[_attachment(a) for a in message.attachments],
        platform_data={
            "guild_id": str(guild_id) if guild_id is not None else None,
            "reply_to_message_id": (str(reference.message_id)
                                    if reference and reference.message_id else None),
            "created_at": message.created_at.isoformat(),
        },
    )


def reaction_name(emoji: discord.PartialEmoji) -> str:
    """The unicode character itself, or a custom emoji's name (its id means nothing to a model)."""
    if emoji.is_custom_emoji():
        return emoji.name or str(emoji)
    return str(emoji)


def inbound_from_reaction(event: discord.RawReactionActionEvent, bot_id: int
                          ) -> InboundMessage | None:
    """A reaction as an inbound event; None for the bot's own reactions."""
    if event.user_id == bot_id:
        return None
    emoji = reaction_name(event.emoji)
    member = event.member
    is_direct = event.guild_id is None
    return InboundMessage(
        provider=PROVIDER,
        chat_id=str(event.channel_id),
        message_id=f"reaction-{event.message_id}-{event.user_id}-{emoji}",
        sender_id=str(event.user_id),
        sender_name=member.display_name if member else "",
        text="",
        kind="reaction",
        reaction=emoji,
        target_message_id=str(event.message_id),
        is_direct=is_direct,
        is_mention=is_direct or event.message_author_id == bot_id,
        from_bot=bool(member and member.bot),
        platform_data={"guild_id": str(event.guild_id) if event.guild_id else None},
    )


# -- catching up -------------------------------------------------------------------------


def baseline_cursors(client: discord.Client, known: set[int] | dict[int, int]
                     ) -> dict[int, int]:
    """Cursors for readable channels that have none: their newest message, so history before
    the bot first saw a channel is never answered (a channel with no message: its own id,
    which every later message id exceeds)."""
    baseline: dict[int, int] = {}
    for guild in client.guilds:
        if guild.me is None:
            continue
        for channel in (*guild.text_channels, *guild.threads):
            if channel.id not in known and channel.permissions_for(guild.me).read_message_history:
                baseline[channel.id] = channel.last_message_id or channel.id
    return baseline


async def missed_pages(client: discord.Client, channel_id: int, after: int, page_size: int
                       ) -> AsyncIterator[list[discord.Message]]:
    """Every message in a channel after `after`, oldest first, a page of at most `page_size`
    at a time (a page is one REST call; none when the channel's known last message is not
    newer), until a page comes back short."""
    channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
    last = getattr(channel, "last_message_id", None)
    if not isinstance(channel, discord.abc.Messageable) or (last and last <= after):
        return
    while True:
        page = [message async for message in channel.history(
            limit=page_size, after=discord.Object(after), oldest_first=True)]
        if page:
            yield page
        if len(page) < page_size:
            return
        after = page[-1].id


# -- outbound ----------------------------------------------------------------------------


def reply_target(reply_to: str | None) -> int | None:
    """The Discord message to reply to: a message id, or the message a reaction was on."""
    if not reply_to:
        return None
    if reply_to.isdigit():
        return int(reply_to)
    match = _REACTION_ID.match(reply_to)
    return int(match.group(1)) if match else None


MAX_NONCE_LENGTH = 25  # Discord's limit on a message create's `nonce`


def nonce_for(message_id: str) -> str:
    """The `nonce` of every create of one outbox record: its id when Discord takes it as
    is, else a digest of it (same id, same nonce, on every node and after every restart)."""
    if len(message_id) <= MAX_NONCE_LENGTH and message_id.isascii():
        return message_id
    return "h" + hashlib.sha256(message_id.encode()).hexdigest()[:MAX_NONCE_LENGTH - 1]


async def send_message(channel: discord.abc.Messageable, message: OutboundMessage,
                       reference: discord.MessageReference | None) -> discord.Message:
    """Send one outbox message: its text, or the file it became (`options.as_file`, with
    its `filename` and `note`); failures come back as classified `SendError`s.

    Exactly once: the create carries the record's nonce with `enforce_nonce` (discord.py
    sets that flag whenever a nonce is given), so when a send is repeated -- the daemon
    was killed after Discord accepted it, or discord.py retried a 5xx or a timeout --
    Discord answers with the message it created the first time and creates none (within
    its window of a few minutes)."""
    options: dict[str, Any] = {"allowed_mentions": ALLOWED_MENTIONS,
                               "nonce": nonce_for(message.message_id)}
    if reference is not None:
        options["reference"] = reference
    how = message.options
    try:
        if how.as_file:
            upload = discord.File(io.BytesIO(message.content.encode()),
                                  filename=safe_filename(how.filename or "reply.txt"))
            return await channel.send(content=how.note or None, file=upload, **options)
        return await channel.send(content=message.content, **options)
    except SEND_FAILURES as exc:
        raise send_error(exc) from exc


#: Edits that cannot succeed on that message: it is gone (a user deleted it), or it is not
#: the bot's. Its text goes out as a new message instead.
UNKNOWN_MESSAGE, CANNOT_EDIT_OTHERS = 10008, 50005


async def edit_reply(client: discord.Client, channel_id: int, message: OutboundMessage) -> bool:
    """Edit the bot's message `options.edit_of` to the outbox message's text, with mentions
    disabled as for every send, on `client` -- the reply client, not the feedback one the
    adapter's `edit` uses: the dispatcher retries this edit and paces it with the chat's
    sends. discord.py waits out a short 429 itself, as for a send; the rest comes back as a
    classified `SendError`. False when the message cannot be edited (see UNKNOWN_MESSAGE):
    the caller sends the text as a new message."""
    how = message.options
    if how.as_file:
        raise SendError("a reply sent as a file cannot edit a message", permanent=True)
    if not how.edit_of.isdigit():
        raise SendError(f"{how.edit_of[:40]!r} is not a Discord message id", permanent=True)
    try:
        with handle_message_parameters(content=message.content,
                                       allowed_mentions=ALLOWED_MENTIONS) as params:
            await client.http.edit_message(channel_id, int(how.edit_of), params=params)
    except discord.HTTPException as exc:
        if exc.status in (403, 404) and exc.code in (UNKNOWN_MESSAGE, CANNOT_EDIT_OTHERS):
            return False
        raise send_error(exc) from exc
    except SEND_FAILURES as exc:
        raise send_error(exc) from exc
    return True


def _retry_after(error: discord.HTTPException) -> float | None:
    header = error.response.headers.get("Retry-After") if error.response is not None else None
    try:
        return float(header) if header is not None else None
    except ValueError:
        return None


def send_error(error: BaseException) -> SendError:
    """Classify a failure so the dispatcher retries only what can succeed later.

    discord.py already waits out ordinary 429s and retries 500/502/504 itself; what reaches
    us is a limit longer than `max_ratelimit_timeout` (retry later), an outage (retry), or a
    request Discord will never accept: missing access (403), an unknown channel or message
    (404), a rejected token (401) or rejected content (other 4xx).
    """
    if isinstance(error, discord.RateLimited):
        return SendError(f"Discord rate limit: retry in {error.retry_after:.1f}s",
                         retry_after=error.retry_after)
    if isinstance(error, discord.HTTPException):
        detail = f"Discord answered {error.status} (code {error.code}): {error.text or 'no text'}"
        if error.status == 429:
            return SendError(detail, retry_after=_retry_after(error))
        if isinstance(error, discord.DiscordServerError) or error.status >= 500:
            return SendError(detail)
        return SendError(detail, permanent=400 <= error.status < 500)
    if isinstance(error, aiohttp.ClientError | OSError | TimeoutError):
        return SendError(f"cannot reach Discord: {type(error).__name__}: {error}")
    return SendError(f"{type(error).__name__}: {error}")


# -- files -------------------------------------------------------------------------------


def download_filename(attachment: Attachment) -> str:
    """`<file id>_<name>`: the id keeps two attachments called `image.png` apart."""
    return safe_filename(attachment.name or "file", attachment.file_id or "")


async def fetch_attachment(attachment: Attachment, cap: int) -> bytes:
    """GET an attachment, refusing more than `cap` bytes whether declared or only counted."""
    url, name = attachment.url or "", attachment.name
    if not url.startswith(("https://", "http://")):
        raise OSError(f"attachment {name!r} has no downloadable URL")
    if attachment.size is not None and attachment.size > cap:
        raise OSError(f"attachment {name!r} is {attachment.size:,} bytes; the limit is {cap:,}")
    timeout = aiohttp.ClientTimeout(total=300, sock_read=60)
    data = bytearray()
    try:
        async with (aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(url) as response):
            if response.status != 200:
                raise OSError(f"downloading {name!r} failed: HTTP {response.status}")
            if response.content_length is not None and response.content_length > cap:
                raise OSError(f"attachment {name!r} is {response.content_length:,} bytes; "
                              f"the limit is {cap:,}")
            async for chunk in response.content.iter_chunked(_DOWNLOAD_CHUNK):
                data.extend(chunk)
                if len(data) > cap:
                    raise OSError(f"attachment {name!r} is larger than the {cap:,}-byte limit")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OSError(f"downloading {name!r} failed: {exc}") from exc
    return bytes(data)


