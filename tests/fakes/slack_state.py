"""The fake Slack workspace: channels, users, message history, files, and the test-side
API that makes "users" post, reply, react and share files.

Events produced by the test-side API go out over Socket Mode via
:class:`tests.fakes.slack_socket.SocketModeHub`; HTTP handling lives in
:mod:`tests.fakes.slack_methods` / :mod:`tests.fakes.slack_api`.
"""

from __future__ import annotations

import itertools
import mimetypes
from typing import Any

from tests.fakes.loopback_base import FakeServerBase
from tests.fakes.slack_objects import (
    BOT_NAME,
    BOT_USER_ID,
    PostedMessage,
    SlackFile,
    SlackUpload,
    TsClock,
    channel_dict,
    channel_type,
    events_api_envelope,
    ts_key,
    user_dict,
    user_message,
)
from tests.fakes.slack_params import SlackError
from tests.fakes.slack_socket import SocketModeHub

DEFAULT_SUBSCRIPTIONS = frozenset({"message", "app_mention", "reaction_added", "reaction_removed"})


class SlackWorld(FakeServerBase):
    """Workspace state shared by the Web API handlers and the test-side API."""

    def __init__(
        self,
        *,
        echo_bot_events: bool = True,
        subscriptions: frozenset[str] = DEFAULT_SUBSCRIPTIONS,
        redeliver_after: float | None = None,
    ) -> None:
        super().__init__()
        #: Slack delivers the app's own messages/reactions back to it; adapters must
        #: ignore them. Set False to keep event streams minimal in unrelated tests.
        self.echo_bot_events = echo_bot_events
        self.subscriptions = subscriptions
        self.socket = SocketModeHub(self._notify, redeliver_after)
        self.clock = TsClock()
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}  # ascending ts, replies included
        self.messages: list[PostedMessage] = []  # posted by the bot, live objects
        self.uploads: list[SlackUpload] = []
        self.files: dict[str, SlackFile] = {}
        self._ids = itertools.count(1)
        self.add_user(BOT_USER_ID, BOT_NAME, is_bot=True)
        self.add_channel("C0GENERAL1", "general")

    # -- registry --------------------------------------------------------------------------
    def add_user(
        self, user_id: str, name: str | None = None, *, real_name: str | None = None,
        is_bot: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Register (or return) a workspace member."""
        if user_id not in self.users:
            login = name or f"user{user_id[-4:].lower()}"
            self.users[user_id] = user_dict(user_id, login, real_name=real_name, is_bot=is_bot)
        return self.users[user_id]

    def add_channel(
        self, channel_id: str | None = None, name: str | None = None, *, bot_member: bool = True,
        user: str | None = None,
    ) -> str:  # fmt: skip
        """Register a conversation; the id prefix picks the kind (C public, G private, D IM).

        Returns the channel id (generated as ``C...`` when omitted).
        """
        channel_id = channel_id or f"C{next(self._ids):09d}"
        if channel_id not in self.channels:
            label = name or f"channel-{channel_id.lower()}"
            self.channels[channel_id] = channel_dict(
                channel_id, label, is_member=bot_member, user=user
            )
            self.history[channel_id] = []
        return channel_id

    def im_channel(self, user_id: str) -> str:
        """The DM conversation between the bot and ``user_id`` (created on first use)."""
        self.add_user(user_id)
        return self.add_channel(f"D{user_id.removeprefix('U')}", user=user_id)

    # -- test-side injection -------------------------------------------------------------
    def post_user_message(
        self,
        channel: str,
        text: str,
        user: str = "U0HUMAN001",
        thread_ts: str | None = None,
        *,
        files: list[tuple[str, bytes]] | None = None,
    ) -> dict[str, Any]:
        """A user posts ``text`` (optionally in a thread / with files); returns the message.

        The message lands in history and a ``message`` event is pushed over Socket Mode,
        plus ``app_mention`` when the text contains ``<@BOT_USER_ID>`` outside DMs. Unknown
        channels/users are created so tests need little setup.
        """
        self.add_user(user)
        channel = self.add_channel(channel, user=user if channel.startswith("D") else None)
        parent = self._find(channel, thread_ts) if thread_ts else None
        message = user_message(
            user, text, self.clock.next(), thread_ts, parent["user"] if parent else None
        )
        if files:
            self._attach_user_files(message, channel, user, files)
        self._append(channel, message)
        event = dict(message, channel=channel, event_ts=message["ts"])
        event["channel_type"] = channel_type(channel)
        self.push_event(event)
        if f"<@{BOT_USER_ID}>" in text and not channel.startswith("D"):
            mention = {k: v for k, v in event.items() if k not in ("channel_type", "subtype")}
            self.push_event(dict(mention, type="app_mention"))
        return message

    def add_reaction_event(
        self, channel: str, ts: str, user: str = "U0HUMAN001", reaction: str = "thumbsup"
    ) -> dict[str, Any]:
        """A user reacts to message ``ts``; updates the message and pushes ``reaction_added``."""
        message = self._find(channel, ts)
        self.add_user(user)
        self._add_reaction(message, reaction, user)
        return self._reaction_event("reaction_added", channel, message, user, reaction)

    def push_event(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Wrap ``event`` in an event_callback envelope and deliver it, if subscribed."""
        if event.get("type") not in self.subscriptions:
            return None
        envelope = events_api_envelope(event)
        self.socket.push(envelope)
        return envelope

    def push_envelope(self, envelope: dict[str, Any]) -> None:
        """Deliver a raw Socket Mode envelope (e.g. malformed ones)."""
        self.socket.push(envelope)

    def channel_history(self, channel: str) -> list[dict[str, Any]]:
        """Every message in ``channel`` (thread replies included), oldest first."""
        return self.history[channel]

    def bot_texts(self, channel: str | None = None) -> list[str]:
        """Texts of live (not deleted) bot messages, optionally for one channel."""
        return [m.text for m in self.messages if not m.deleted and channel in (None, m.channel)]

    # -- helpers for handlers ------------------------------------------------------------
    def _channel(self, ref: str | None) -> str:
        """Resolve a ``channel`` argument: id, ``#name``/name, or a user id (opens a DM)."""
        if not ref:
            raise SlackError("channel_not_found")
        if ref in self.channels:
            return ref
        if ref.startswith("U") and ref in self.users:
            return self.im_channel(ref)
        name = ref.removeprefix("#")
        for channel_id, channel in self.channels.items():
            if channel.get("name") == name:
                return channel_id
        raise SlackError("channel_not_found")

    def _find(
        self, channel: str, ts: str | None, error: str = "message_not_found"
    ) -> dict[str, Any]:
        for message in self.history.get(channel, []):
            if message["ts"] == ts:
                return message
        raise SlackError(error)

    def _append(self, channel: str, message: dict[str, Any]) -> None:
        self.history[channel].append(message)
        self.history[channel].sort(key=lambda m: ts_key(m["ts"]))
        thread_ts = message.get("thread_ts")
        if thread_ts and thread_ts != message["ts"]:
            try:
                self._bump_parent(self._find(channel, thread_ts), message)
            except SlackError:
                pass  # reply to an unknown parent: Slack keeps it as an orphan reply
        self._notify()

    def _bump_parent(self, parent: dict[str, Any], reply: dict[str, Any]) -> None:
        parent["thread_ts"] = parent["ts"]
        parent["reply_count"] = parent.get("reply_count", 0) + 1
        users = parent.setdefault("reply_users", [])
        if reply["user"] not in users:
            users.append(reply["user"])
        parent["reply_users_count"] = len(users)
        parent["latest_reply"] = reply["ts"]
        parent.setdefault("is_locked", False)
        parent.setdefault("subscribed", False)

    def _add_reaction(self, message: dict[str, Any], name: str, user: str) -> None:
        reactions = message.setdefault("reactions", [])
        entry = next((r for r in reactions if r["name"] == name), None)
        if entry is None:
            entry = {"name": name, "users": [], "count": 0}
            reactions.append(entry)
        if user in entry["users"]:
            raise SlackError("already_reacted")
        entry["users"].append(user)
        entry["count"] += 1
        self._notify()

    def _reaction_event(
        self, kind: str, channel: str, message: dict[str, Any], user: str, reaction: str
    ) -> dict[str, Any]:
        event = {
            "type": kind,
            "user": user,
            "reaction": reaction,
            "item": {"type": "message", "channel": channel, "ts": message["ts"]},
            "item_user": message.get("user"),
            "event_ts": self.clock.next(),
        }
        self.push_event(event)
        return event

    def _new_file(self, name: str, data: bytes, user: str, title: str | None = None) -> SlackFile:
        file = SlackFile(f"F{next(self._ids):09d}", name, title or name, data, user)
        file.mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self.files[file.id] = file
        return file

    def _attach_user_files(
        self, message: dict[str, Any], channel: str, user: str, files: list[tuple[str, bytes]]
    ) -> None:
        shared = [self._new_file(name, data, user) for name, data in files]
        for file in shared:
            file.shares.append((channel, message["ts"]))
        message.update(subtype="file_share", upload=True, display_as_bot=False)
        message["files"] = [f.to_dict(self.url) for f in shared]
