"""Builders for Bot API JSON objects (User, Chat, Message, File, ...).

Shapes follow https://core.telegram.org/bots/api and were checked against what
python-telegram-bot's ``de_json`` requires (e.g. ``Message.date``, ``Chat.type``,
``User.is_bot``, ``ChatFullInfo.accent_color_id`` / ``accepted_gift_types``), so a real
SDK parses them without falling back to defaults.
"""

from __future__ import annotations

import mimetypes
import re
import struct
import time
from dataclasses import dataclass
from typing import Any

from tests.fakes.telegram_markup import utf16_len

#: Emoji accepted by ``setMessageReaction`` (the Bot API's ReactionTypeEmoji list).
# fmt: off
REACTION_EMOJI = frozenset((
    "👍", "👎", "❤", "🔥", "🥰", "👏", "😁", "🤔", "🤯", "😱", "🤬", "😢", "🎉", "🤩", "🤮",
    "💩", "🙏", "👌", "🕊", "🤡", "🥱", "🥴", "😍", "🐳", "❤️‍🔥", "🌚", "🌭", "💯", "🤣",
    "⚡", "🍌", "🏆", "💔", "🤨", "😐", "🍓", "🍾", "💋", "🖕", "😈", "😴", "😭", "🤓", "👻",
    "👨‍💻", "👀", "🎃", "🙈", "😇", "😨", "🤝", "✍", "🤗", "🫡", "🎅", "🎄", "☃", "💅", "🤪",
    "🗿", "🆒", "💘", "🙉", "🦄", "😘", "💊", "🙊", "😎", "👾", "🤷‍♂️", "🤷", "🤷‍♀️", "😡",
))
# fmt: on

CHAT_ACTIONS = frozenset(
    {
        "typing", "upload_photo", "record_video", "upload_video", "record_voice",
        "upload_voice", "upload_document", "choose_sticker", "find_location",
        "record_video_note", "upload_video_note",
    }
)  # fmt: skip

#: Update kinds delivered when ``allowed_updates`` was never set or set to ``[]``.
OPT_IN_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

#: Bot API limit for files downloadable through getFile.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024

_COMMAND = re.compile(r"(?<![\w/])/[a-zA-Z0-9_]{1,32}(?:@[a-zA-Z0-9_]{3,32})?(?![\w/])")
_MENTION = re.compile(r"(?<![\w@])@[a-zA-Z0-9_]{4,32}\b")
_URL = re.compile(r"\bhttps?://[^\s<>\"]+")


@dataclass
class StoredFile:
    """A file the fake can serve through ``getFile`` + the file download URL."""

    file_id: str
    file_unique_id: str
    data: bytes
    file_path: str
    filename: str
    mime_type: str

    def file_dict(self) -> dict[str, Any]:
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.data),
            "file_path": self.file_path,
        }

    def document_dict(self) -> dict[str, Any]:
        return {
            "file_name": self.filename,
            "mime_type": self.mime_type,
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.data),
        }

    def photo_sizes(self) -> list[dict[str, Any]]:
        """Telegram sends several sizes; the last is the largest (here: the original)."""
        width, height = image_size(self.data)
        full = {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.data),
            "width": width,
            "height": height,
        }
        thumb = dict(full, width=max(1, width // 4), height=max(1, height // 4))
        thumb["file_id"] += "-s"
        thumb["file_unique_id"] += "s"
        return [thumb, full]


def image_size(data: bytes) -> tuple[int, int]:
    """Width/height from a PNG header; a plausible default for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    return 640, 480


def guess_mime(filename: str) -> str:
    return mimetypes.guess_type(filename, strict=False)[0] or "application/octet-stream"


def now() -> int:
    return int(time.time())


def user_dict(
    user_id: int,
    first_name: str,
    *,
    username: str | None = None,
    is_bot: bool = False,
    language_code: str | None = "en",
) -> dict[str, Any]:
    user: dict[str, Any] = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
    if username:
        user["username"] = username
    if language_code and not is_bot:
        user["language_code"] = language_code
    return user


def chat_dict(
    chat_id: int | str,
    chat_type: str,
    *,
    title: str | None = None,
    username: str | None = None,
    first_name: str | None = None,
    is_forum: bool = False,
) -> dict[str, Any]:
    chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
    if chat_type == "private":
        chat["first_name"] = first_name or f"User{chat_id}"
    else:
        chat["title"] = title or f"Test {chat_type} {chat_id}"
    if username:
        chat["username"] = username
    if is_forum:
        chat["is_forum"] = True
    return chat


def full_chat_info(chat: dict[str, Any]) -> dict[str, Any]:
    """``getChat`` result (ChatFullInfo); PTB 22 requires the gift/colour fields."""
    return dict(
        chat,
        accent_color_id=0,
        max_reaction_count=11,
        accepted_gift_types={
            "unlimited_gifts": False,
            "limited_gifts": False,
            "unique_gifts": False,
            "premium_subscription": False,
            "gifts_from_channels": False,
        },
    )


_ADMIN_RIGHTS = (
    "can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
    "can_promote_members", "can_change_info", "can_invite_users", "can_post_stories",
    "can_edit_stories", "can_delete_stories", "can_pin_messages", "can_manage_topics",
)  # fmt: skip


def chat_member_dict(user: dict[str, Any], status: str) -> dict[str, Any]:
    """ChatMember variants the fake supports: creator, administrator, member, left, kicked."""
    member: dict[str, Any] = {"status": status, "user": user}
    if status == "creator":
        member["is_anonymous"] = False
    elif status == "administrator":
        member.update({"can_be_edited": False, "is_anonymous": False})
        member.update(dict.fromkeys(_ADMIN_RIGHTS, True))
    elif status == "kicked":
        member["until_date"] = 0
    return member


def detect_entities(text: str) -> list[dict[str, Any]]:
    """Entities a Telegram client/server adds to plain user text.

    PTB's ``CommandHandler`` only fires on a ``bot_command`` entity at offset 0, so pushed
    messages must carry them just as real ones do.
    """
    found: list[dict[str, Any]] = []
    for kind, pattern in (("bot_command", _COMMAND), ("mention", _MENTION), ("url", _URL)):
        for match in pattern.finditer(text):
            found.append(
                {
                    "type": kind,
                    "offset": utf16_len(text[: match.start()]),
                    "length": utf16_len(match.group(0)),
                }
            )
    return sorted(found, key=lambda e: e["offset"])


def message_dict(
    message_id: int,
    chat: dict[str, Any],
    sender: dict[str, Any],
    *,
    text: str | None = None,
    entities: list[dict[str, Any]] | None = None,
    thread_id: int | None = None,
    reply_to: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Message; text goes in ``text`` (media messages set ``caption`` themselves)."""
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": sender,
        "chat": chat,
        "date": now(),
    }
    if thread_id is not None:
        message["message_thread_id"] = thread_id
        if chat.get("is_forum"):
            message["is_topic_message"] = True
    if reply_to is not None:
        message["reply_to_message"] = {k: v for k, v in reply_to.items() if k != "reply_to_message"}
    if text is not None:
        message["text"] = text
        if entities:
            message["entities"] = entities
    return message


def attach_media(
    message: dict[str, Any],
    stored: StoredFile,
    kind: str,
    caption: str | None,
    caption_entities: list[dict[str, Any]] | None = None,
) -> None:
    """Turn ``message`` into a document/photo message with an optional caption."""
    message.pop("text", None)
    message.pop("entities", None)
    message[kind] = stored.photo_sizes() if kind == "photo" else stored.document_dict()
    if caption:
        message["caption"] = caption
        if caption_entities:
            message["caption_entities"] = caption_entities


def update_kind(update: dict[str, Any]) -> str | None:
    """The update's payload field (``message``, ``message_reaction``, ...)."""
    return next((key for key in update if key != "update_id"), None)


def reaction_list(emoji: str | list[str] | None) -> list[dict[str, Any]]:
    if not emoji:
        return []
    items = [emoji] if isinstance(emoji, str) else emoji
    return [{"type": "emoji", "emoji": e} for e in items]
