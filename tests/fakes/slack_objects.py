"""Builders for Slack Web API / Events API JSON objects.

Shapes follow docs.slack.dev examples (channel, user, message, file, event_callback
envelopes) closely enough that slack_sdk, slack_bolt and adapters see the fields they
read: ``ts`` strings, ``thread_ts``/``parent_user_id`` on replies, ``bot_id`` on bot
messages, ``channel_type`` on message events, ``authorizations`` on event callbacks.
"""

from __future__ import annotations

import base64
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

TEAM_ID = "T0FAKETEAM"
TEAM_DOMAIN = "soulflow-fake"
APP_ID = "A0FAKEAPP1"
BOT_ID = "B0FAKEBOT1"
BOT_USER_ID = "U0FAKEBOT1"
BOT_NAME = "soulflow"

_event_counter = itertools.count(1)


class TsClock:
    """Message timestamps: ``"<unix seconds>.<6 digits>"``, strictly increasing, as Slack
    uses ``ts`` as the message id within a channel."""

    def __init__(self) -> None:
        self._last_us = 0

    def next(self) -> str:
        self._last_us = max(int(time.time() * 1_000_000), self._last_us + 1)
        return f"{self._last_us // 1_000_000}.{self._last_us % 1_000_000:06d}"


def ts_key(ts: str) -> tuple[int, int]:
    """Sort/compare key for ``ts`` strings (string order breaks across digit counts)."""
    seconds, _, micros = ts.partition(".")
    return int(seconds or 0), int((micros or "0").ljust(6, "0")[:6])


def encode_cursor(ts: str) -> str:
    """Opaque cursor in Slack's style (base64 of ``next_ts:<digits>``)."""
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def decode_cursor(cursor: str) -> str | None:
    try:
        text = base64.b64decode(cursor.encode(), validate=True).decode()
    except ValueError:
        return None
    return text.removeprefix("next_ts:") if text.startswith("next_ts:") else None


@dataclass
class SlackFile:
    """A hosted file: uploaded by the bot (upload v2) or shared by a user."""

    id: str
    name: str
    title: str
    data: bytes
    user: str
    mimetype: str = "application/octet-stream"
    created: int = field(default_factory=lambda: int(time.time()))
    uploaded: bool = True
    shares: list[tuple[str, str]] = field(default_factory=list)  # (channel, ts)

    def to_dict(self, base_url: str) -> dict[str, Any]:
        private = f"{base_url}/files-pri/{TEAM_ID}-{self.id}/{self.name}"
        filetype = self.name.rpartition(".")[2].lower() if "." in self.name else "binary"
        channels = sorted({c for c, _ in self.shares if c[0] == "C"})
        return {
            "id": self.id,
            "created": self.created,
            "timestamp": self.created,
            "name": self.name,
            "title": self.title,
            "mimetype": self.mimetype,
            "filetype": filetype,
            "pretty_type": filetype.upper(),
            "user": self.user,
            "user_team": TEAM_ID,
            "editable": False,
            "size": len(self.data),
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": bool(channels),
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": private,
            "url_private_download": f"{private}?download=1",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{self.user}/{self.id}/{self.name}",
            "permalink_public": f"https://slack-files.com/{TEAM_ID}-{self.id}-0000000000",
            "comments_count": 0,
            "channels": channels,
            "groups": sorted({c for c, _ in self.shares if c[0] == "G"}),
            "ims": sorted({c for c, _ in self.shares if c[0] == "D"}),
            "has_rich_preview": False,
            "file_access": "visible",
        }


@dataclass
class PostedMessage:
    """A message the bot posted; ``message`` is the live history object, so edits and
    reactions made later are visible."""

    channel: str
    message: dict[str, Any]
    deleted: bool = False

    @property
    def ts(self) -> str:
        return str(self.message["ts"])

    @property
    def text(self) -> str:
        return str(self.message.get("text", ""))

    @property
    def thread_ts(self) -> str | None:
        return self.message.get("thread_ts")

    @property
    def blocks(self) -> list[dict[str, Any]] | None:
        return self.message.get("blocks")


@dataclass
class SlackUpload:
    """A file the bot shared through the upload-v2 flow, as the fake received it."""

    file_id: str
    filename: str
    title: str
    data: bytes
    channel: str | None
    thread_ts: str | None
    initial_comment: str | None


def channel_dict(
    channel_id: str, name: str, *, is_member: bool = True, user: str | None = None
) -> dict[str, Any]:
    """A conversation object; the id prefix decides the kind (C public, G private, D IM)."""
    created = int(time.time())
    if channel_id.startswith("D"):
        return {
            "id": channel_id, "created": created, "is_archived": False, "is_im": True,
            "is_org_shared": False, "context_team_id": TEAM_ID, "updated": created * 1000,
            "user": user, "is_user_deleted": False, "priority": 0, "is_open": True,
        }  # fmt: skip
    private = channel_id.startswith("G")
    return {
        "id": channel_id, "name": name, "name_normalized": name, "is_channel": not private,
        "is_group": private, "is_im": False, "is_mpim": False, "is_private": private,
        "created": created, "is_archived": False, "is_general": name == "general",
        "unlinked": 0, "is_shared": False, "is_org_shared": False, "is_ext_shared": False,
        "is_pending_ext_shared": False, "pending_shared": [], "context_team_id": TEAM_ID,
        "updated": created * 1000, "creator": BOT_USER_ID, "shared_team_ids": [TEAM_ID],
        "is_member": is_member, "previous_names": [],
        "topic": {"value": "", "creator": "", "last_set": 0},
        "purpose": {"value": "", "creator": "", "last_set": 0},
    }  # fmt: skip


def channel_type(channel_id: str) -> str:
    """``channel_type`` of message events."""
    return {"D": "im", "G": "group"}.get(channel_id[:1], "channel")


def user_dict(
    user_id: str, name: str, *, real_name: str | None = None, is_bot: bool = False
) -> dict[str, Any]:
    real = real_name or name.title()
    profile: dict[str, Any] = {
        "title": "", "phone": "", "skype": "", "real_name": real,
        "real_name_normalized": real, "display_name": name, "display_name_normalized": name,
        "status_text": "", "status_emoji": "", "avatar_hash": "g0000000000",
        "image_72": f"https://secure.gravatar.com/avatar/{user_id}.jpg?s=72",
        "first_name": real.split()[0], "last_name": " ".join(real.split()[1:]), "team": TEAM_ID,
    }  # fmt: skip
    if is_bot:
        profile.update(bot_id=BOT_ID, api_app_id=APP_ID, always_active=True)
    return {
        "id": user_id, "team_id": TEAM_ID, "name": name, "deleted": False, "color": "9f69e7",
        "real_name": real, "tz": "Europe/Berlin", "tz_label": "Central European Time",
        "tz_offset": 3600, "profile": profile, "is_admin": False, "is_owner": False,
        "is_primary_owner": False, "is_restricted": False, "is_ultra_restricted": False,
        "is_bot": is_bot, "is_app_user": False, "updated": int(time.time()),
        "is_email_confirmed": not is_bot, "who_can_share_contact_card": "EVERYONE",
    }  # fmt: skip


def bot_profile() -> dict[str, Any]:
    return {
        "id": BOT_ID, "deleted": False, "name": BOT_NAME, "updated": int(time.time()),
        "app_id": APP_ID, "icons": {"image_48": "https://a.slack-edge.com/bot_48.png"},
        "team_id": TEAM_ID,
    }  # fmt: skip


def rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """What Slack clients attach to user-typed messages."""
    element = {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
    return [{"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [element]}]


def user_message(
    user: str, text: str, ts: str, thread_ts: str | None, parent_user: str | None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "client_msg_id": str(uuid.uuid4()), "type": "message", "text": text, "user": user,
        "ts": ts, "blocks": rich_text_blocks(text), "team": TEAM_ID,
    }  # fmt: skip
    _thread(message, thread_ts, parent_user)
    return message


def bot_message(
    text: str, ts: str, thread_ts: str | None, parent_user: str | None, blocks: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "user": BOT_USER_ID, "type": "message", "ts": ts, "bot_id": BOT_ID, "app_id": APP_ID,
        "text": text, "team": TEAM_ID, "bot_profile": bot_profile(),
    }  # fmt: skip
    if blocks:
        message["blocks"] = blocks
    _thread(message, thread_ts, parent_user)
    return message


def _thread(message: dict[str, Any], thread_ts: str | None, parent_user: str | None) -> None:
    if thread_ts:
        message["thread_ts"] = thread_ts
        if parent_user:
            message["parent_user_id"] = parent_user


def event_payload(event: dict[str, Any]) -> dict[str, Any]:
    """The ``event_callback`` wrapper the Events API delivers."""
    return {
        "token": "fake-verification-token", "team_id": TEAM_ID, "context_team_id": TEAM_ID,
        "context_enterprise_id": None, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": f"Ev{next(_event_counter):010d}",
        "event_time": int(time.time()),
        "authorizations": [{
            "enterprise_id": None, "team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True,
            "is_enterprise_install": False,
        }],
        "is_ext_shared_channel": False, "event_context": f"4-{uuid.uuid4().hex}",
    }  # fmt: skip


def events_api_envelope(event: dict[str, Any]) -> dict[str, Any]:
    """A Socket Mode envelope carrying one Events API callback."""
    return {
        "envelope_id": str(uuid.uuid4()),
        "payload": event_payload(event),
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": 0,
        "retry_reason": "",
    }
