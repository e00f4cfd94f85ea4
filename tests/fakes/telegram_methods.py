"""Bot API method handlers of the fake Telegram server (everything except getUpdates).

Each ``m_<method>`` takes decoded :class:`Params` and returns the ``result`` value, or
raises :class:`ApiError` with the description the real server uses, so adapters see the
same failures (``chat not found``, ``message is not modified``, ``REACTION_INVALID``...).
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.telegram_markup import MarkupError, parse_markup, utf16_len
from tests.fakes.telegram_objects import (
    CHAT_ACTIONS,
    MAX_DOWNLOAD_BYTES,
    REACTION_EMOJI,
    StoredFile,
    attach_media,
    chat_member_dict,
    full_chat_info,
    message_dict,
    now,
)
from tests.fakes.telegram_params import ApiError, Params, Upload, bad_request
from tests.fakes.telegram_state import SentFile, TelegramWorld

_COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"RIFF", b"BM")
_NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)


def _valid_reaction(item: Any) -> bool:
    """Emoji must be from the fixed list; custom emoji ids are numeric document ids.

    (PTB silently turns an unknown emoji string such as "✅" into a custom_emoji reaction,
    which the real API then rejects, so this matters for adapters.)
    """
    if not isinstance(item, dict):
        return False
    if item.get("type") == "emoji":
        return item.get("emoji") in REACTION_EMOJI
    if item.get("type") == "custom_emoji":
        return str(item.get("custom_emoji_id", "")).isdigit()
    return item.get("type") == "paid"


class TelegramMethods(TelegramWorld):
    """Handlers named ``m_<BotApiMethod>``; dispatch is by lower-cased method name."""

    async def m_getMe(self, params: Params) -> dict[str, Any]:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    # -- messages ----------------------------------------------------------------------
    async def m_sendMessage(self, params: Params) -> dict[str, Any]:
        chat = self._chat(params.get("chat_id"))
        text, entities = self._format(params.text("text"), params, "entities")
        if not text.strip():
            raise bad_request("message text is empty")
        if utf16_len(text) > 4096:
            raise bad_request("message is too long")
        return self._new_bot_message(chat, params, text=text, entities=entities)

    async def m_editMessageText(self, params: Params) -> dict[str, Any] | bool:
        if params.get("inline_message_id"):
            return True
        chat = self._chat(params.get("chat_id"))
        message_id = params.integer("message_id", required=True)
        message = self._message(chat["id"], message_id, "message to edit not found")
        if message["from"]["id"] != self.bot_id:
            raise bad_request("message can't be edited")
        if "text" not in message:
            raise bad_request("there is no text in the message to edit")
        text, entities = self._format(params.text("text"), params, "entities")
        if not text.strip():
            raise bad_request("message text is empty")
        markup = params.obj("reply_markup")
        same_markup = markup is None or markup == message.get("reply_markup")
        if text == message["text"] and entities == message.get("entities", []) and same_markup:
            raise bad_request(_NOT_MODIFIED)
        message["text"] = text
        message.pop("entities", None)
        if entities:
            message["entities"] = entities
        message["edit_date"] = now()
        return message

    async def m_deleteMessage(self, params: Params) -> bool:
        chat = self._chat(params.get("chat_id"))
        message_id = params.integer("message_id", required=True)
        self._message(chat["id"], message_id, "message to delete not found")
        del self.messages[(chat["id"], message_id or 0)]
        self.deleted_messages.append((chat["id"], message_id or 0))
        return True

    async def m_sendDocument(self, params: Params) -> dict[str, Any]:
        return self._send_media(params, "document")

    async def m_sendPhoto(self, params: Params) -> dict[str, Any]:
        return self._send_media(params, "photo")

    def _format(
        self, raw: str | None, params: Params, entities_param: str
    ) -> tuple[str, list[dict[str, Any]]]:
        """Apply ``parse_mode`` (explicit entities win, as in the real API)."""
        raw = raw or ""
        explicit = params.obj(entities_param)
        if explicit is not None:
            return raw, explicit
        try:
            return parse_markup(raw, params.text("parse_mode"))
        except MarkupError as error:
            raise ApiError(400, error.description) from error

    def _reply_target(self, chat: dict[str, Any], params: Params) -> dict[str, Any] | None:
        reply = params.obj("reply_parameters")
        reply = reply if isinstance(reply, dict) else {}
        message_id = reply.get("message_id") or params.integer("reply_to_message_id")
        if message_id is None:
            return None
        target = self.messages.get((chat["id"], message_id))
        lenient = reply.get("allow_sending_without_reply") or params.flag(
            "allow_sending_without_reply"
        )
        if target is None and not lenient:
            raise bad_request("message to be replied not found")
        return target

    def _new_bot_message(
        self,
        chat: dict[str, Any],
        params: Params,
        *,
        text: str | None = None,
        entities: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Create, store and record a message sent by the bot."""
        target = self._reply_target(chat, params)
        message = message_dict(
            self._new_message_id(chat["id"]), chat, self.bot_user, text=text, entities=entities,
            thread_id=params.integer("message_thread_id"), reply_to=target,
        )  # fmt: skip
        markup = params.obj("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            message["reply_markup"] = markup
        self._store_message(message)
        self.sent_messages.append(message)
        return message

    def _send_media(self, params: Params, kind: str) -> dict[str, Any]:
        chat = self._chat(params.get("chat_id"))
        stored = self._media_file(params.upload(kind), kind)
        caption, entities = self._format(params.text("caption"), params, "caption_entities")
        if utf16_len(caption) > 1024:
            raise bad_request("message caption is too long")
        message = self._new_bot_message(chat, params)
        attach_media(message, stored, kind, caption, entities)
        self.sent_files.append(
            SentFile(
                method="sendPhoto" if kind == "photo" else "sendDocument",
                chat_id=chat["id"],
                filename=stored.filename,
                mime_type=stored.mime_type,
                data=stored.data,
                file_id=stored.file_id,
            )
        )
        return message

    def _media_file(self, source: Upload | str | None, kind: str) -> StoredFile:
        """The uploaded part, or a file_id the fake already knows."""
        if source is None:
            raise bad_request(f"there is no {kind} in the request")
        if isinstance(source, str):
            if source in self.files:
                return self.files[source]
            raise bad_request("wrong file identifier/HTTP URL specified")
        if kind == "photo" and not source.data.startswith(_IMAGE_MAGIC):
            raise bad_request("IMAGE_PROCESS_FAILED")
        prefix = "AgAC" if kind == "photo" else "BQAC"
        file_id = f"{prefix}fake{len(self.files):06d}{self.bot_id}"
        filename = source.filename or ("photo.jpg" if kind == "photo" else "document")
        stored = self.add_file(
            file_id,
            source.data,
            filename=filename,
            kind="photos" if kind == "photo" else "documents",
        )
        if kind == "document" and source.content_type:
            stored.mime_type = source.content_type
        return stored

    # -- chat actions, reactions, files ------------------------------------------------
    async def m_sendChatAction(self, params: Params) -> bool:
        chat = self._chat(params.get("chat_id"))
        action = params.text("action")
        if action not in CHAT_ACTIONS:
            raise bad_request("wrong parameter action in request")
        self.chat_actions.append(
            {
                "chat_id": chat["id"],
                "action": action,
                "message_thread_id": params.integer("message_thread_id"),
            }
        )
        return True

    async def m_setMessageReaction(self, params: Params) -> bool:
        chat = self._chat(params.get("chat_id"))
        message_id = params.integer("message_id", required=True)
        self._message(chat["id"], message_id, "MESSAGE_ID_INVALID")
        reaction = params.obj("reaction") or []
        if not isinstance(reaction, list):
            raise bad_request("can't parse reaction JSON object")
        if not all(_valid_reaction(item) for item in reaction):
            raise bad_request("REACTION_INVALID")
        if len(reaction) > 1:
            raise bad_request("REACTIONS_TOO_MANY")
        self.bot_reactions.append(
            {
                "chat_id": chat["id"],
                "message_id": message_id,
                "reaction": reaction,
                "is_big": params.flag("is_big"),
            }
        )
        return True

    async def m_getFile(self, params: Params) -> dict[str, Any]:
        stored = self.files.get(params.text("file_id") or "")
        if stored is None:
            raise bad_request("invalid file_id")
        if len(stored.data) > MAX_DOWNLOAD_BYTES:
            raise bad_request("file is too big")
        return stored.file_dict()

    # -- webhook, chats, commands ------------------------------------------------------
    async def m_setWebhook(self, params: Params) -> bool:
        self.webhook_url = params.text("url") or ""
        if params.flag("drop_pending_updates"):
            self._updates.clear()
        return True

    async def m_deleteWebhook(self, params: Params) -> bool:
        self.webhook_url = ""
        if params.flag("drop_pending_updates"):
            self._updates.clear()
        return True

    async def m_getWebhookInfo(self, params: Params) -> dict[str, Any]:
        info: dict[str, Any] = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }
        if self.allowed_updates is not None:
            info["allowed_updates"] = sorted(self.allowed_updates)
        return info

    async def m_getChat(self, params: Params) -> dict[str, Any]:
        return full_chat_info(self._chat(params.get("chat_id")))

    async def m_getChatMember(self, params: Params) -> dict[str, Any]:
        chat = self._chat(params.get("chat_id"))
        user_id = params.integer("user_id", required=True) or 0
        user = self.users.get(user_id)
        if user is None:
            raise bad_request("user not found")
        status = self.member_status.get((chat["id"], user_id), "member")
        return chat_member_dict(user, status)

    async def m_setMyCommands(self, params: Params) -> bool:
        commands = params.obj("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise bad_request("can't parse commands JSON object")
        for command in commands:
            name, description = command.get("command", ""), command.get("description", "")
            if not _COMMAND_NAME.match(name) or not 1 <= len(description) <= 256:
                raise bad_request("BOT_COMMAND_INVALID")
        self.commands = commands
        return True

    async def m_getMyCommands(self, params: Params) -> list[dict[str, Any]]:
        return self.commands

    async def m_deleteMyCommands(self, params: Params) -> bool:
        self.commands = []
        return True
