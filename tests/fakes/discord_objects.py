"""Data model, JSON payload builders and REST wire helpers for the loopback fake Discord.

Everything here produces the *wire* shapes Discord API v10 sends (snowflakes as
strings, ISO-8601 timestamps, nested ``member``/``user`` objects) so the real
discord.py parsers run unmodified against the fake.  See ``discord_api.py`` for
how to point discord.py at the fake.
"""

from __future__ import annotations

import datetime as dt
import enum
import fnmatch
import hashlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback_base import encode_json

DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_CONTENT_LENGTH = 2000

JSON = dict[str, Any]


class Intent(enum.IntFlag):
    """Gateway intent bits the fake honours when filtering dispatches."""

    GUILDS = 1 << 0
    GUILD_MEMBERS = 1 << 1
    GUILD_PRESENCES = 1 << 8
    GUILD_MESSAGES = 1 << 9
    GUILD_MESSAGE_REACTIONS = 1 << 10
    GUILD_MESSAGE_TYPING = 1 << 11
    DIRECT_MESSAGES = 1 << 12
    DIRECT_MESSAGE_REACTIONS = 1 << 13
    DIRECT_MESSAGE_TYPING = 1 << 14
    MESSAGE_CONTENT = 1 << 15


PRIVILEGED_INTENTS = Intent.GUILD_MEMBERS | Intent.GUILD_PRESENCES | Intent.MESSAGE_CONTENT

# VIEW_CHANNEL, SEND_MESSAGES, EMBED_LINKS, ATTACH_FILES, READ_MESSAGE_HISTORY,
# ADD_REACTIONS, USE_EXTERNAL_EMOJIS: enough for discord.py permission checks.
EVERYONE_PERMISSIONS = str(
    (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 6) | (1 << 18)
)


class SnowflakeFactory:
    """Issues time-ordered snowflakes so ``snowflake_time`` gives sane datetimes."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        stamp = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last = max(stamp, self._last + 1)
        return self._last


def iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


@dataclass
class FakeUser:
    id: int
    username: str
    bot: bool = False

    def payload(self) -> JSON:
        return {
            "id": str(self.id),
            "username": self.username,
            "global_name": None if self.bot else self.username.title(),
            "discriminator": "0",
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
            "flags": 0,
        }


@dataclass
class FakeChannel:
    id: int
    name: str
    type: int = 0  # 0 = GUILD_TEXT, 1 = DM
    guild_id: int | None = None
    position: int = 0
    recipient_id: int | None = None
    last_message_id: int | None = None


@dataclass
class SentFile:
    """One uploaded ``files[n]`` multipart part."""

    field_name: str
    filename: str
    content_type: str | None
    data: bytes


@dataclass
class SentMessage:
    """A message the bot created through ``POST /channels/{id}/messages``."""

    channel_id: int
    content: str | None
    payload: JSON
    message: JSON
    files: list[SentFile] = field(default_factory=list)
    reply_to: int | None = None

    @property
    def id(self) -> int:
        return int(self.message["id"])


@dataclass
class EditedMessage:
    channel_id: int
    message_id: int
    payload: JSON
    message: JSON


@dataclass
class RecordedReaction:
    channel_id: int
    message_id: int
    emoji: str  # decoded: "👍" or "name:id" for custom emoji
    removed: bool = False


@dataclass
class RecordedTyping:
    channel_id: int
    at: float


@dataclass
class RecordedRequest:
    method: str
    path: str
    route: str  # discord.py style key, e.g. "POST /channels/{channel_id}/messages"
    name: str | None  # friendly name, e.g. "send_message"
    headers: dict[str, str]
    query: dict[str, str]
    json: Any = None
    status: int | None = None
    client_port: int | None = None  # which connection (client) the request came on


@dataclass
class Fault:
    """A queued failure or delay matched against the next REST requests."""

    pattern: str
    status: int | None = None
    retry_after: float | None = None
    is_global: bool = False
    delay: float = 0.0
    count: int = 1
    body: JSON | None = None


@dataclass
class AttachmentSpec:
    """An attachment to put on a pushed (user-sent) message."""

    filename: str
    data: bytes
    content_type: str | None = None


class World:
    """The single bot's view of Discord: one guild, its channels, users and messages."""

    def __init__(
        self,
        *,
        bot_name: str = "soulflow-bot",
        guild_name: str = "Soulflow Test Guild",
        channel_names: tuple[str, ...] = ("general", "bot-test"),
        user_names: tuple[str, ...] = ("alice", "bob"),
    ) -> None:
        self.ids = SnowflakeFactory()
        self.bot = FakeUser(self.ids.next(), bot_name, bot=True)
        self.users: dict[int, FakeUser] = {self.bot.id: self.bot}
        self.member_ids: list[int] = [self.bot.id]
        self.by_name: dict[str, int] = {}
        for name in user_names:
            self.add_user(name)
        self.owner_id = next(iter(self.by_name.values()), self.bot.id)
        self.guild_id = self.ids.next()
        self.guild_name = guild_name
        self.joined_at = iso_now()
        self.channels: dict[int, FakeChannel] = {}
        self.channel_ids: dict[str, int] = {}
        for position, name in enumerate(channel_names):
            channel = FakeChannel(self.ids.next(), name, 0, self.guild_id, position)
            self.channels[channel.id] = channel
            self.channel_ids[name] = channel.id
        self.messages: dict[int, JSON] = {}

    # -- users and channels -------------------------------------------------

    def add_user(self, username: str, *, bot: bool = False, user_id: int | None = None) -> FakeUser:
        user = FakeUser(user_id or self.ids.next(), username, bot=bot)
        self.users[user.id] = user
        self.by_name[username] = user.id
        self.member_ids.append(user.id)
        return user

    def user(self, user_id: int) -> FakeUser:
        """Unknown authors are created on the fly so tests can use any id."""
        if user_id not in self.users:
            self.add_user(f"user{user_id}", user_id=user_id)
        return self.users[user_id]

    def dm_channel(self, user_id: int) -> FakeChannel:
        for channel in self.channels.values():
            if channel.type == 1 and channel.recipient_id == user_id:
                return channel
        self.user(user_id)
        channel = FakeChannel(self.ids.next(), "", 1, None, 0, recipient_id=user_id)
        self.channels[channel.id] = channel
        return channel

    # -- payloads -----------------------------------------------------------

    def member_payload(self, user_id: int, *, with_user: bool = True) -> JSON:
        data: JSON = {
            "nick": None,
            "avatar": None,
            "roles": [],
            "joined_at": self.joined_at,
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }
        if with_user:
            data["user"] = self.user(user_id).payload()
        return data

    def channel_payload(self, channel: FakeChannel) -> JSON:
        last = str(channel.last_message_id) if channel.last_message_id else None
        if channel.type == 1:
            recipient = self.user(channel.recipient_id or 0).payload()
            return {"id": str(channel.id), "type": 1, "last_message_id": last, "flags": 0,
                    "recipients": [recipient]}
        return {
            "id": str(channel.id),
            "type": channel.type,
            "guild_id": str(channel.guild_id),
            "name": channel.name,
            "position": channel.position,
            "permission_overwrites": [],
            "nsfw": False,
            "topic": None,
            "last_message_id": last,
            "rate_limit_per_user": 0,
            "parent_id": None,
            "flags": 0,
        }

    def everyone_role(self) -> JSON:
        return {
            "id": str(self.guild_id), "name": "@everyone", "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False, "icon": None, "unicode_emoji": None, "position": 0,
            "permissions": EVERYONE_PERMISSIONS, "managed": False, "mentionable": False,
            "flags": 0,
        }

    def guild_payload(self) -> JSON:
        """The REST ``GET /guilds/{id}`` shape (no channels/members)."""
        return {
            "id": str(self.guild_id), "name": self.guild_name, "icon": None, "splash": None,
            "discovery_splash": None, "owner_id": str(self.owner_id), "afk_channel_id": None,
            "afk_timeout": 300, "verification_level": 0, "default_message_notifications": 0,
            "explicit_content_filter": 0, "roles": [self.everyone_role()], "emojis": [],
            "stickers": [], "features": [], "mfa_level": 0, "application_id": None,
            "system_channel_id": str(next(iter(self.channels))) if self.channels else None,
            "system_channel_flags": 0, "rules_channel_id": None, "vanity_url_code": None,
            "description": None, "banner": None, "premium_tier": 0,
            "premium_subscription_count": 0, "preferred_locale": "en-US",
            "public_updates_channel_id": None, "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "approximate_member_count": len(self.member_ids),
            "approximate_presence_count": 0,
        }

    def guild_create_payload(self, *, all_members: bool) -> JSON:
        """GUILD_CREATE: full member list only with MEMBERS+PRESENCES; else just the bot.

        That is what makes discord.py chunk (op 8) at startup when only the
        members intent is on.
        """
        members = self.member_ids if all_members else [self.bot.id]
        data = self.guild_payload()
        data.update(
            joined_at=self.joined_at, large=False, unavailable=False, lazy=True,
            member_count=len(self.member_ids),
            members=[self.member_payload(uid) for uid in members],
            channels=[self.channel_payload(c) for c in self.channels.values() if c.guild_id],
            threads=[], presences=[], voice_states=[], stage_instances=[],
            guild_scheduled_events=[], soundboard_sounds=[],
        )
        return data

    def mention_payload(self, user_id: int, guild: bool) -> JSON:
        data = self.user(user_id).payload()
        if guild:
            data["member"] = self.member_payload(user_id, with_user=False)
        return data

    def app_info_payload(self) -> JSON:
        return {
            "id": str(self.bot.id), "name": self.bot.username, "icon": None,
            "description": "", "summary": "", "type": None, "hook": True,
            "bot_public": True, "bot_require_code_grant": False,
            "verify_key": "0" * 64, "flags": 0, "owner": self.user(self.owner_id).payload(),
            "team": None, "bot": self.bot.payload(), "rpc_origins": [], "redirect_uris": [],
            "interactions_endpoint_url": None, "tags": [],
        }

    def build_message(
        self,
        channel: FakeChannel,
        author_id: int,
        content: str,
        *,
        mentions: list[int] | None = None,
        attachments: list[JSON] | None = None,
        reply_to: int | None = None,
        extra: JSON | None = None,
    ) -> JSON:
        """Create, store and return a full message object."""
        in_guild = channel.guild_id is not None
        mention_ids = list(dict.fromkeys(mentions or []))
        referenced = self.messages.get(reply_to) if reply_to else None
        if referenced is not None and int(referenced["author"]["id"]) not in mention_ids:
            mention_ids.append(int(referenced["author"]["id"]))
        message_id = self.ids.next()
        data: JSON = {
            "id": str(message_id), "channel_id": str(channel.id), "type": 19 if reply_to else 0,
            "author": self.user(author_id).payload(), "content": content,
            "timestamp": iso_now(), "edited_timestamp": None, "tts": False,
            "mention_everyone": False,
            "mentions": [self.mention_payload(uid, in_guild) for uid in mention_ids],
            "mention_roles": [], "attachments": attachments or [], "embeds": [],
            "pinned": False, "flags": 0, "components": [],
        }
        if in_guild:
            data["guild_id"] = str(channel.guild_id)
            data["member"] = self.member_payload(author_id, with_user=False)
        if reply_to:
            data["message_reference"] = {"type": 0, "message_id": str(reply_to),
                                         "channel_id": str(channel.id)}
            if in_guild:
                data["message_reference"]["guild_id"] = str(channel.guild_id)
            data["referenced_message"] = referenced
        data.update(extra or {})
        self.messages[message_id] = data
        channel.last_message_id = message_id
        return data

    def channel_messages(self, channel_id: int) -> list[JSON]:
        return [m for m in self.messages.values() if int(m["channel_id"]) == channel_id]


_attachment_counter = itertools.count(1)


def attachment_payload(attachment_id: int, filename: str, data: bytes, url: str,
                       content_type: str | None) -> JSON:
    """Discord CDN URLs are signed (``ex``/``is``/``hm``); mimic that so adapters cope."""
    now = int(time.time())
    signed = f"{url}?ex={now + 86400:x}&is={now:x}&hm={next(_attachment_counter):064x}&"
    payload: JSON = {"id": str(attachment_id), "filename": filename, "size": len(data),
                     "url": signed, "proxy_url": signed}
    if content_type:
        payload["content_type"] = content_type
    return payload


def redact_for_intents(message: JSON, intents: int, bot_id: int) -> JSON:
    """Apply Discord's MESSAGE_CONTENT rule: blank content unless DM, mention or own message."""
    if intents & Intent.MESSAGE_CONTENT:
        return message
    if "guild_id" not in message or int(message["author"]["id"]) == bot_id:
        return message
    if any(int(m["id"]) == bot_id for m in message.get("mentions", [])):
        return message
    redacted = dict(message)
    redacted.update(content="", embeds=[], attachments=[], components=[])
    return redacted


def form_body_error(field: str, code: str, message: str) -> JSON:
    """Discord's 50035 "Invalid Form Body" answer, naming the one field it refused."""
    return {
        "message": "Invalid Form Body",
        "code": 50035,
        "errors": {field: {"_errors": [{"code": code, "message": message}]}},
    }


def content_too_long_error() -> JSON:
    return form_body_error("content", "BASE_TYPE_MAX_LENGTH",
                           f"Must be {MAX_CONTENT_LENGTH} or fewer in length.")


def unknown_reply_error() -> JSON:
    return form_body_error("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                           "Unknown message")


# -- REST wire conventions ---------------------------------------------------


class DiscordError(Exception):
    """Raised by handlers; rendered as Discord's ``{"message", "code"}`` error body."""

    def __init__(self, status: int, message: str, code: int = 0, body: JSON | None = None):
        super().__init__(message)
        self.status = status
        self.body = body or {"message": message, "code": code}


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> web.Response:
    """Exactly ``application/json`` (no charset) plus ``Via``, as discord.py requires."""
    all_headers = {"Content-Type": "application/json", "Via": "1.1 google", **(headers or {})}
    return web.Response(body=encode_json(data), status=status, headers=all_headers)


def no_content() -> web.Response:
    return web.Response(status=204, headers={"Via": "1.1 google"})


def fault_matches(pattern: str, route: str, name: str | None, method: str, path: str) -> bool:
    """Match a route name, a route key, or a glob on ``"METHOD /path"`` / ``/path``."""
    return pattern in (name, route) or any(
        fnmatch.fnmatchcase(candidate, pattern) for candidate in (f"{method} {path}", path, route)
    )


#: Per-route limits that matter to a bot, per channel (the route's major parameter): creating
#: and editing a message, 5 per 5 s each, in buckets of their own. Discord publishes no numbers
#: ("rate limits should not be hard coded"; a client reads them from the X-RateLimit-* headers
#: of each answer), so these are the values bots observe, announced in those headers as
#: Discord does; every other route gets the fake's generic ``rate_limit``.
DISCORD_ROUTE_LIMITS: dict[str, tuple[int, float]] = {"send_message": (5, 5.0),
                                                      "edit_message": (5, 5.0)}


class RateLimitBuckets:
    """Per route+major-parameter windows producing real ``X-RateLimit-*`` headers.

    ``route_limits`` overrides the default ``(limit, window)`` for named routes (keys are
    ``"<route name>|<route>:<major id>"``); ``enabled=False`` keeps the headers but never 429s.
    """

    def __init__(self, limit: int, window: float,
                 route_limits: dict[str, tuple[int, float]] | None = None,
                 enabled: bool = True) -> None:
        self.limit, self.window = limit, window
        self.route_limits = dict(route_limits or {})
        self.enabled = enabled
        self._state: dict[str, tuple[float, int]] = {}

    def _shape(self, key: str) -> tuple[int, float]:
        name = key.partition("|")[0]
        return self.route_limits.get(name, (self.limit, self.window))

    def hit(self, key: str) -> tuple[int, float]:
        """Count one request; return (remaining, reset_after). remaining < 0 = limited
        (a limited request is not counted, as on Discord)."""
        limit, window = self._shape(key)
        now = time.monotonic()
        start, used = self._state.get(key, (now, 0))
        if now - start >= window:
            start, used = now, 0
        reset_after = max(0.0, window - (now - start))
        if used >= limit and self.enabled:
            return -1, reset_after
        self._state[key] = (start, used + 1)
        return max(limit - used - 1, 0), reset_after

    def headers(self, key: str, remaining: int, reset_after: float) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self._shape(key)[0]),
            "X-RateLimit-Remaining": str(max(remaining, 0)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": hashlib.sha1(
                key.partition("|")[2].split(":")[0].encode()).hexdigest()[:32],
        }


def rate_limited(retry_after: float, *, is_global: bool, key: str,
                 buckets: RateLimitBuckets) -> web.Response:
    headers = buckets.headers(key, 0, retry_after)
    headers.update({"Retry-After": str(max(1, round(retry_after))),
                    "X-RateLimit-Scope": "global" if is_global else "user"})
    if is_global:
        headers["X-RateLimit-Global"] = "true"
    body = {"message": "You are being rate limited.", "retry_after": retry_after,
            "global": is_global}
    return json_response(body, 429, headers)


async def read_message_body(request: web.Request) -> tuple[JSON, list[SentFile]]:
    """Accept both JSON bodies and multipart (``payload_json`` + ``files[n]``)."""
    if not request.content_type.startswith("multipart/"):
        raw = await request.read()
        try:
            return (json.loads(raw) if raw else {}), []
        except ValueError:
            raise DiscordError(400, "The request body contains invalid JSON.", 50109) from None
    payload: JSON = {}
    files: list[SentFile] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if part.name == "payload_json":
            payload.update(json.loads(await part.text()))
        elif part.filename:
            ctype = part.headers.get("Content-Type")
            files.append(SentFile(part.name or "", part.filename, ctype, bytes(await part.read())))
        elif part.name:
            payload[part.name] = await part.text()
    return payload, files
