"""The fake Telegram "world": chats, users, messages, files, the update queue, and the
test-side API that injects what real users would do.

HTTP handling lives in :mod:`tests.fakes.telegram_api`; this module has no routing so the
state rules (message ids per chat, update confirmation by offset, allowed_updates) are
readable on their own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tests.fakes.loopback_base import FakeServerBase
from tests.fakes.telegram_objects import (
    OPT_IN_UPDATES,
    StoredFile,
    attach_media,
    chat_dict,
    detect_entities,
    guess_mime,
    message_dict,
    now,
    reaction_list,
    update_kind,
    user_dict,
)
from tests.fakes.telegram_params import bad_request

ChatRef = int | str


@dataclass
class SentFile:
    """A file the bot uploaded (sendDocument / sendPhoto), as the fake received it."""

    method: str
    chat_id: ChatRef
    filename: str
    mime_type: str
    data: bytes
    file_id: str


class TelegramWorld(FakeServerBase):
    """State shared by the Bot API handlers and the test-side API."""

    def __init__(
        self,
        token: str,
        *,
        bot_username: str = "soulflow_test_bot",
        bot_name: str = "SoulFlow Test Bot",
        first_update_id: int = 100_000_001,
    ) -> None:
        super().__init__()
        self.token = token
        prefix = token.partition(":")[0]
        self.bot_id = int(prefix) if prefix.isdigit() else 7_000_000_001
        self.bot_user = user_dict(self.bot_id, bot_name, username=bot_username, is_bot=True)
        self.chats: dict[ChatRef, dict[str, Any]] = {}
        self.users: dict[int, dict[str, Any]] = {self.bot_id: self.bot_user}
        self.messages: dict[tuple[ChatRef, int], dict[str, Any]] = {}
        self.sent_messages: list[dict[str, Any]] = []
        self.sent_files: list[SentFile] = []
        self.deleted_messages: list[tuple[ChatRef, int]] = []
        self.chat_actions: list[dict[str, Any]] = []
        self.bot_reactions: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.files: dict[str, StoredFile] = {}
        self.member_status: dict[tuple[ChatRef, int], str] = {}
        self.webhook_url = ""
        self.allowed_updates: frozenset[str] | None = None
        self._updates: list[tuple[int, dict[str, Any]]] = []
        self._next_update_id = first_update_id
        self._last_message_id: dict[ChatRef, int] = {}
        self._user_reactions: dict[tuple[ChatRef, int, int], list[dict[str, Any]]] = {}

    # -- test-side registry ------------------------------------------------------------
    def add_user(
        self, user_id: int, first_name: str | None = None, *, username: str | None = None
    ) -> dict[str, Any]:
        """Register (or return) a human user."""
        if user_id not in self.users:
            name = first_name or f"User{user_id}"
            self.users[user_id] = user_dict(user_id, name, username=username or f"user{user_id}")
        return self.users[user_id]

    def add_chat(
        self,
        chat_id: int,
        chat_type: str = "private",
        *,
        title: str | None = None,
        username: str | None = None,
        is_forum: bool = False,
    ) -> dict[str, Any]:
        """Register (or return) a chat the bot can talk to."""
        if chat_id not in self.chats:
            first_name = None
            if chat_type == "private":
                user = self.add_user(chat_id, username=username)
                first_name, username = user["first_name"], user.get("username")
            self.chats[chat_id] = chat_dict(
                chat_id,
                chat_type,
                title=title,
                username=username,
                first_name=first_name,
                is_forum=is_forum,
            )
        return self.chats[chat_id]

    def set_member_status(self, chat_id: int, user_id: int, status: str) -> None:
        """Status ``getChatMember`` reports (creator/administrator/member/left/kicked)."""
        self.member_status[(chat_id, user_id)] = status

    def add_file(
        self, file_id: str, data: bytes, *, filename: str = "file.bin", kind: str = "documents"
    ) -> StoredFile:
        """Make ``data`` downloadable via ``getFile(file_id)`` and the file URL."""
        unique = hashlib.sha1(file_id.encode()).hexdigest()[:16]
        suffix = filename.rpartition(".")[2] if "." in filename else "bin"
        stored = StoredFile(
            file_id=file_id,
            file_unique_id=unique,
            data=data,
            file_path=f"{kind}/file_{len(self.files)}.{suffix}",
            filename=filename,
            mime_type=guess_mime(filename),
        )
        self.files[file_id] = stored
        return stored

    # -- test-side injection -----------------------------------------------------------
    def push_message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        from_id: int | None = None,
        chat_type: str = "private",
        username: str | None = None,
        first_name: str | None = None,
        title: str | None = None,
        entities: list[dict[str, Any]] | None = None,
        reply_to: int | None = None,
        message_thread_id: int | None = None,
        document: bytes | tuple[str, bytes] | None = None,
        photo: bytes | None = None,
    ) -> dict[str, Any]:
        """Queue a ``message`` update as if a user wrote to the bot; returns the Update.

        ``text`` becomes the caption when ``document``/``photo`` is given. ``entities``
        defaults to what Telegram would detect (bot_command, mention, url).
        """
        if from_id is None:
            if chat_type != "private":
                raise ValueError("from_id is required for group chats")
            from_id = chat_id
        sender = self.add_user(from_id, first_name, username=username)
        chat = self.add_chat(chat_id, chat_type, title=title)
        target = self.messages.get((chat_id, reply_to)) if reply_to is not None else None
        if reply_to is not None and target is None:
            raise ValueError(f"no message {reply_to} in chat {chat_id} to reply to")
        message = message_dict(
            self._new_message_id(chat_id), chat, sender, thread_id=message_thread_id,
            reply_to=target, text=text,
            entities=entities if entities is not None else detect_entities(text or ""),
        )  # fmt: skip
        media = self._pushed_media(message, document, photo)
        if media is not None:
            stored, kind = media
            attach_media(message, stored, kind, text, message.get("entities"))
        self._store_message(message)
        return self._enqueue({"message": message})

    def _pushed_media(
        self,
        message: dict[str, Any],
        document: bytes | tuple[str, bytes] | None,
        photo: bytes | None,
    ) -> tuple[StoredFile, str] | None:
        file_id = f"user-file-{message['chat']['id']}-{message['message_id']}"
        if document is not None:
            name, data = document if isinstance(document, tuple) else ("document.bin", document)
            return self.add_file(file_id, data, filename=name), "document"
        if photo is not None:
            return self.add_file(file_id, photo, filename="photo.jpg", kind="photos"), "photo"
        return None

    def push_reaction(
        self, chat_id: int, message_id: int, from_id: int, emoji: str | list[str] | None
    ) -> dict[str, Any]:
        """Queue a ``message_reaction`` update (``emoji=None`` removes the reaction).

        Like the real API it is only delivered if the bot asked for ``message_reaction`` in
        ``allowed_updates``.
        """
        key = (chat_id, message_id, from_id)
        new = reaction_list(emoji)
        payload = {
            "chat": self.add_chat(chat_id, "private" if chat_id > 0 else "supergroup"),
            "message_id": message_id,
            "user": self.add_user(from_id),
            "date": now(),
            "old_reaction": self._user_reactions.get(key, []),
            "new_reaction": new,
        }
        self._user_reactions[key] = new
        return self._enqueue({"message_reaction": payload})

    def push_raw_update(self, update: dict[str, Any]) -> int:
        """Queue ``update`` verbatim (for malformed-update tests); returns its queue id.

        An integer ``update_id`` in ``update`` is used as is; otherwise the next id is used
        for ordering/confirmation without being added to the payload.
        """
        update_id = update.get("update_id")
        if not isinstance(update_id, int):
            update_id = self._next_update_id
        self._next_update_id = max(self._next_update_id, update_id + 1)
        self._updates.append((update_id, update))
        self._updates.sort(key=lambda item: item[0])
        self._notify()
        return update_id

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by an ``offset`` (delivered or not)."""
        return [update for _, update in self._updates]

    def sent_texts(self, chat_id: ChatRef | None = None) -> list[str]:
        """Text/caption of messages the bot sent, optionally for one chat."""
        return [
            m.get("text", m.get("caption", ""))
            for m in self.sent_messages
            if chat_id is None or m["chat"]["id"] == chat_id
        ]

    # -- helpers for the API handlers ----------------------------------------------------
    def _enqueue(self, payload: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": self._next_update_id, **payload}
        self.push_raw_update(update)
        return update

    def _new_message_id(self, chat_id: ChatRef) -> int:
        self._last_message_id[chat_id] = self._last_message_id.get(chat_id, 0) + 1
        return self._last_message_id[chat_id]

    def _store_message(self, message: dict[str, Any]) -> None:
        self.messages[(message["chat"]["id"], message["message_id"])] = message

    def _chat(self, ref: Any) -> dict[str, Any]:
        """Resolve a ``chat_id`` parameter (id or ``@username``) or fail like Telegram."""
        if ref is None or ref == "":
            raise bad_request("chat_id is empty")
        if isinstance(ref, str) and ref.startswith("@"):
            for chat in self.chats.values():
                if chat.get("username", "").lower() == ref[1:].lower():
                    return chat
        elif ref in self.chats:
            return self.chats[ref]
        raise bad_request("chat not found")

    def _message(self, chat_id: ChatRef, message_id: int | None, reason: str) -> dict[str, Any]:
        message = self.messages.get((chat_id, message_id or 0))
        if message is None:
            raise bad_request(reason)
        return message

    def _confirm(self, offset: int) -> None:
        """Forget updates below ``offset`` (negative: keep only the last ``-offset``)."""
        if offset > 0:
            self._updates = [item for item in self._updates if item[0] >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]

    def _collect(self, limit: int) -> list[dict[str, Any]]:
        """Deliverable updates; kinds excluded by ``allowed_updates`` are discarded, as the
        real server never stores them."""
        allowed = self.allowed_updates
        kept: list[tuple[int, dict[str, Any]]] = []
        for update_id, update in self._updates:
            kind = update_kind(update)
            if allowed is None and kind in OPT_IN_UPDATES:
                continue
            if allowed is not None and kind is not None and kind not in allowed:
                continue
            kept.append((update_id, update))
        self._updates = kept
        return [update for _, update in kept[:limit]]
