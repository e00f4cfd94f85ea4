"""Slack Web API method handlers of the fake (``m_<method with dots as underscores>``).

Each returns the JSON body of a successful reply (``ok`` is added by the dispatcher) or
raises :class:`SlackError` with the error code the real API documents for that case.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from tests.fakes.slack_objects import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_DOMAIN,
    TEAM_ID,
    PostedMessage,
    SlackFile,
    SlackUpload,
    bot_message,
    channel_type,
    decode_cursor,
    encode_cursor,
    ts_key,
)
from tests.fakes.slack_params import Params, SlackError
from tests.fakes.slack_state import SlackWorld

MAX_TEXT = 40_000
MAX_BLOCKS = 50
_EMOJI_NAME = re.compile(r"^[a-z0-9_+\-']+(::skin-tone-[2-6])?$")


class SlackMethods(SlackWorld):
    """Web API handlers; upload tickets map ``upload_url`` ids to pending files."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._upload_tickets: dict[str, str] = {}  # ticket -> file id

    async def m_auth_test(self, params: Params) -> dict[str, Any]:
        return {
            "url": f"https://{TEAM_DOMAIN}.slack.com/", "team": "SoulFlow Fake",
            "user": BOT_NAME, "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }  # fmt: skip

    async def m_apps_connections_open(self, params: Params) -> dict[str, Any]:
        return {"url": self.socket.issue_url(self.url.replace("http://", "ws://", 1))}

    # -- chat ------------------------------------------------------------------------------
    async def m_chat_postMessage(self, params: Params) -> dict[str, Any]:
        channel = self._writable_channel(params.text("channel"))
        text, blocks = self._content(params)
        attachments = params.json("attachments")
        if not text and not blocks and not attachments:
            raise SlackError("no_text")
        thread_ts = params.text("thread_ts")
        parent = self._parent(channel, thread_ts)
        metadata = _metadata(params)
        message = bot_message(text, self.clock.next(), thread_ts, parent, blocks)
        if attachments:
            message["attachments"] = attachments
        if metadata is not None:
            message["metadata"] = metadata
        if thread_ts and params.flag("reply_broadcast"):
            message["subtype"] = "thread_broadcast"
        self._append(channel, message)
        self.messages.append(PostedMessage(channel, message))
        self._echo(channel, message)
        return {"channel": channel, "ts": message["ts"], "message": message}

    async def m_chat_update(self, params: Params) -> dict[str, Any]:
        channel = self._channel(params.text("channel"))
        message = self._own_message(channel, params.text("ts"), "cant_update_message")
        if params.text("text") is None and params.get("blocks") is None:
            raise SlackError("no_text")
        previous = dict(message)
        text, blocks = self._content(params)
        message["text"] = text
        if blocks is not None:
            message["blocks"] = blocks
        message["edited"] = {"user": BOT_USER_ID, "ts": self.clock.next()}
        self._notify()
        if self.echo_bot_events:
            ts = self.clock.next()
            self.push_event(
                {"type": "message", "subtype": "message_changed", "hidden": True,
                 "message": message, "previous_message": previous, "channel": channel,
                 "ts": ts, "event_ts": ts, "channel_type": channel_type(channel)}
            )  # fmt: skip
        return {"channel": channel, "ts": message["ts"], "text": text, "message": message}

    async def m_chat_delete(self, params: Params) -> dict[str, Any]:
        channel = self._channel(params.text("channel"))
        message = self._own_message(channel, params.text("ts"), "cant_delete_message")
        self.history[channel].remove(message)
        for posted in self.messages:
            if posted.message is message:
                posted.deleted = True
        self._notify()
        return {"channel": channel, "ts": message["ts"]}

    def _page_size(self, requested: int) -> int:
        """Hook: the page size a read gets for ``requested`` (the fake caps it by its limits)."""
        return requested

    def _writable_channel(self, ref: str | None) -> str:
        channel = self._channel(ref)
        info = self.channels[channel]
        if info.get("is_archived"):
            raise SlackError("is_archived")
        if info.get("is_member") is False:
            raise SlackError("not_in_channel")
        return channel

    def _content(self, params: Params) -> tuple[str, list[dict[str, Any]] | None]:
        text = params.text("text", "") or ""
        if len(text) > MAX_TEXT:
            raise SlackError("msg_too_long")
        blocks = params.json("blocks", "invalid_blocks_format")
        if blocks is None or blocks == []:
            return text, None
        valid = isinstance(blocks, list) and len(blocks) <= MAX_BLOCKS
        if not valid or not all(
            isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks
        ):
            raise SlackError("invalid_blocks")
        return text, blocks

    def _parent(self, channel: str, thread_ts: str | None) -> str | None:
        """Author of the thread parent (for ``parent_user_id``), if it exists."""
        if not thread_ts:
            return None
        try:
            return self._find(channel, thread_ts).get("user")
        except SlackError:
            return None

    def _own_message(self, channel: str, ts: str | None, not_own_error: str) -> dict[str, Any]:
        message = self._find(channel, ts)
        if message.get("user") != BOT_USER_ID:
            raise SlackError(not_own_error)
        return message

    def _echo(self, channel: str, message: dict[str, Any]) -> None:
        """Slack sends the app its own messages too (adapters must filter by bot_id)."""
        if self.echo_bot_events:  # the message event carries no metadata (its own events do)
            event = dict(message, channel=channel, event_ts=message["ts"])
            event.pop("metadata", None)
            self.push_event(dict(event, channel_type=channel_type(channel)))

    # -- conversations -----------------------------------------------------------------
    async def m_conversations_history(self, params: Params) -> dict[str, Any]:
        channel = self._channel(params.text("channel"))
        top_level = [
            m for m in self.history[channel]
            if m.get("thread_ts") in (None, m["ts"]) or m.get("subtype") == "thread_broadcast"
        ]  # fmt: skip
        window = self._window(top_level, params)
        page = self._page(list(reversed(window)), params, newest_first=True, default_limit=100)
        return _with_metadata(page, params)

    async def m_conversations_replies(self, params: Params) -> dict[str, Any]:
        channel = self._channel(params.text("channel"))
        root = self._find(channel, params.text("ts"), "thread_not_found")
        thread_ts = root.get("thread_ts", root["ts"])
        thread = [m for m in self.history[channel] if m["ts"] == thread_ts or
                  m.get("thread_ts") == thread_ts]  # fmt: skip
        parent, replies = thread[:1], self._window(thread[1:], params)
        page = self._page(replies, params, newest_first=False, default_limit=1000)
        page["messages"] = parent + page["messages"]
        return _with_metadata(page, params)

    def _window(self, messages: list[dict[str, Any]], params: Params) -> list[dict[str, Any]]:
        """Apply ``oldest``/``latest`` (exclusive unless ``inclusive``)."""
        oldest = ts_key(params.text("oldest", "0") or "0")
        latest = ts_key(params.text("latest", "9999999999.999999") or "0")
        inclusive = params.flag("inclusive")

        def inside(message: dict[str, Any]) -> bool:
            key = ts_key(message["ts"])
            if inclusive:
                return oldest <= key <= latest
            return oldest < key < latest

        return [m for m in messages if inside(m)]

    def _page(
        self, ordered: list[dict[str, Any]], params: Params, *, newest_first: bool,
        default_limit: int,
    ) -> dict[str, Any]:  # fmt: skip
        """Cursor pagination: the cursor encodes the ``ts`` the next page starts at."""
        limit = min(max(self._page_size(params.integer("limit", default_limit)), 1), 999)
        start = 0
        if cursor := params.text("cursor"):
            start_ts = decode_cursor(cursor)
            if start_ts is None:
                raise SlackError("invalid_cursor")
            start = next((i for i, m in enumerate(ordered) if m["ts"] == start_ts), len(ordered))
        page, rest = ordered[start : start + limit], ordered[start + limit :]
        body: dict[str, Any] = {"messages": page, "has_more": bool(rest)}
        body["response_metadata"] = {"next_cursor": encode_cursor(rest[0]["ts"]) if rest else ""}
        if newest_first:
            body.update(pin_count=0, channel_actions_ts=None, channel_actions_count=0)
        return body

    async def m_conversations_info(self, params: Params) -> dict[str, Any]:
        return {"channel": self.channels[self._channel(params.text("channel"))]}

    async def m_conversations_open(self, params: Params) -> dict[str, Any]:
        users = (params.text("users") or "").split(",")
        if len(users) != 1 or users[0] not in self.users:
            raise SlackError("user_not_found")
        channel = self.im_channel(users[0])
        return {"no_op": True, "already_open": True, "channel": {"id": channel}}

    async def m_users_info(self, params: Params) -> dict[str, Any]:
        user = self.users.get(params.text("user") or "")
        if user is None:
            raise SlackError("user_not_found")
        return {"user": user}

    # -- reactions ------------------------------------------------------------------------
    async def m_reactions_add(self, params: Params) -> dict[str, Any]:
        channel, message, name = self._reaction_target(params)
        self._add_reaction(message, name, BOT_USER_ID)
        if self.echo_bot_events:
            self._reaction_event("reaction_added", channel, message, BOT_USER_ID, name)
        return {}

    async def m_reactions_remove(self, params: Params) -> dict[str, Any]:
        channel, message, name = self._reaction_target(params)
        entry = next((r for r in message.get("reactions", []) if r["name"] == name), None)
        if entry is None or BOT_USER_ID not in entry["users"]:
            raise SlackError("no_reaction")
        entry["users"].remove(BOT_USER_ID)
        entry["count"] -= 1
        if not entry["count"]:
            message["reactions"].remove(entry)
        if self.echo_bot_events:
            self._reaction_event("reaction_removed", channel, message, BOT_USER_ID, name)
        return {}

    async def m_reactions_get(self, params: Params) -> dict[str, Any]:
        channel = self._channel(params.text("channel"))
        message = self._find(channel, params.text("timestamp"))
        return {"type": "message", "channel": channel, "message": message}

    def _reaction_target(self, params: Params) -> tuple[str, dict[str, Any], str]:
        if not params.text("channel") or not params.text("timestamp"):
            raise SlackError("no_item_specified")
        channel = self._channel(params.text("channel"))
        name = params.text("name") or ""
        if not _EMOJI_NAME.match(name):
            raise SlackError("invalid_name")
        return channel, self._find(channel, params.text("timestamp")), name

    # -- files (upload v2) -------------------------------------------------------------
    async def m_files_getUploadURLExternal(self, params: Params) -> dict[str, Any]:
        filename = params.require("filename")
        if params.integer("length", 0) <= 0:
            raise SlackError("invalid_arguments")
        file = self._new_file(filename, b"", BOT_USER_ID)
        file.uploaded = False
        ticket = uuid.uuid4().hex
        self._upload_tickets[ticket] = file.id
        return {"upload_url": f"{self.url}/upload/v1/{ticket}", "file_id": file.id}

    def receive_upload(self, ticket: str, data: bytes) -> bool:
        """Store bytes POSTed to an upload URL; False for unknown tickets."""
        file_id = self._upload_tickets.pop(ticket, None)
        if file_id is None:
            return False
        self.files[file_id].data = data
        self.files[file_id].uploaded = True
        self._notify()
        return True

    async def m_files_completeUploadExternal(self, params: Params) -> dict[str, Any]:
        entries = params.json("files")
        if not isinstance(entries, list) or not entries:
            raise SlackError("invalid_arguments")
        files = [self._completed_file(entry) for entry in entries]
        channel_ref = params.text("channel_id") or params.text("channels")
        channel = self._writable_channel(channel_ref) if channel_ref else None
        thread_ts, comment = params.text("thread_ts"), params.text("initial_comment")
        if channel is not None:
            self._share_files(channel, files, thread_ts, comment)
        for file in files:
            upload = SlackUpload(
                file.id, file.name, file.title, file.data, channel, thread_ts, comment
            )
            self.uploads.append(upload)
        return {"files": [file.to_dict(self.url) for file in files]}

    def _completed_file(self, entry: Any) -> SlackFile:
        file = self.files.get(entry.get("id", "")) if isinstance(entry, dict) else None
        if file is None or not file.uploaded:
            raise SlackError("file_not_found")
        file.title = entry.get("title") or file.title
        return file

    def _share_files(
        self, channel: str, files: list[SlackFile], thread_ts: str | None, comment: str | None
    ) -> None:
        """Post the share message Slack creates for completed uploads."""
        message = bot_message(comment or "", self.clock.next(), thread_ts,
                              self._parent(channel, thread_ts), None)  # fmt: skip
        for file in files:
            file.shares.append((channel, message["ts"]))
        message.update(subtype="file_share", upload=True, display_as_bot=False)
        message["files"] = [file.to_dict(self.url) for file in files]
        self._append(channel, message)
        self.messages.append(PostedMessage(channel, message))
        self._echo(channel, message)

    async def m_files_info(self, params: Params) -> dict[str, Any]:
        file = self.files.get(params.text("file") or "")
        if file is None or not file.uploaded:
            raise SlackError("file_not_found")
        return {"file": file.to_dict(self.url)}


# -- message metadata (https://docs.slack.dev/messaging/message-metadata) -------------------
MAX_METADATA_BYTES = 8_000  # event_payload; Slack answers metadata_too_large past its limit
_EVENT_TYPE = re.compile(r"^[A-Za-z0-9_]+$")


def _metadata(params: Params) -> dict[str, Any] | None:
    """chat.postMessage's `metadata`: an object with an alphanumeric `event_type` and an
    `event_payload` object; anything else is refused as Slack refuses it."""
    metadata = params.json("metadata", "invalid_metadata_format")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise SlackError("invalid_metadata_format")
    event_type, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not (isinstance(event_type, str) and _EVENT_TYPE.match(event_type)
            and isinstance(payload, dict)):
        raise SlackError("invalid_metadata_schema")
    if len(json.dumps(payload)) > MAX_METADATA_BYTES:
        raise SlackError("metadata_too_large")
    return {"event_type": event_type, "event_payload": payload}


def _with_metadata(page: dict[str, Any], params: Params) -> dict[str, Any]:
    """Reads return a message's metadata payload only with `include_all_metadata=true`
    (without it a message shows at most its `event_type`)."""
    if params.flag("include_all_metadata"):
        return page
    shown = []
    for message in page["messages"]:
        if isinstance(message.get("metadata"), dict):
            message = dict(message, metadata={"event_type": message["metadata"]["event_type"]})
        shown.append(message)
    return dict(page, messages=shown)
