"""Translation between Telegram's formats and SoulFlow's, kept apart from the I/O.

Inbound, `UpdateParser` turns one raw Bot API update into an `InboundMessage` (mention
rules, attachments, reactions). Outbound, agents answer in Markdown, but Telegram only
renders its own HTML subset (or MarkdownV2, whose reserved characters make LLM output fail
constantly). HTML needs just `& < >` escaped, so converting to HTML is the robust choice.
The converter builds every tag pair around already-converted content, so its output is
balanced by construction; Markdown it cannot pair (a stray `**`, `_` inside snake_case)
stays literal text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from telegram import (
    Bot,
    Message,
    MessageReactionUpdated,
    ReactionTypeEmoji,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatType, MessageEntityType

from soulflow.contracts import Attachment, InboundMessage, OutboundMessage

_FENCE = re.compile(r"^[ \t]*```([\w+#.-]*)[ \t]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)",
                    re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|tg|mailto):[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)")
_EMPHASIS = (("***", ("b", "i")), ("**", ("b",)), ("__", ("b",)), ("~~", ("s",)),
             ("*", ("i",)), ("_", ("i",)))
_MAX_INBOUND_TEXT = 65_536  # Telegram caps text at 4096; far beyond that is a broken update
_MEDIA_KINDS = ("audio", "video", "voice", "animation")


def escape(text: str) -> str:
    """Escape the three characters Telegram's HTML parser treats specially."""
    return html.escape(text, quote=False)


def markdown_to_telegram_html(text: str) -> str:
    """Convert common Markdown to the HTML subset Telegram accepts (`parse_mode=HTML`)."""
    parts: list[str] = []
    position = 0
    for fence in _FENCE.finditer(text):
        parts.append(_blocks(text[position:fence.start()]))
        parts.append(_code_block(fence.group(2).removesuffix("\n"), fence.group(1)))
        position = fence.end()
    parts.append(_blocks(text[position:]))
    return "".join(parts)


def _code_block(code: str, language: str) -> str:
    """A fenced block; an unclosed fence runs to the end (a truncated answer is still code)."""
    if language:
        return f'<pre><code class="language-{escape(language)}">{escape(code)}</code></pre>'
    return f"<pre>{escape(code)}</pre>"


def _blocks(text: str) -> str:
    """Line-level Markdown (headings, bullets); emphasis never spans lines on purpose."""
    lines = []
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        if heading:
            lines.append(f"<b>{_inline(heading.group(1))}</b>")
            continue
        bullet = _BULLET.match(line)
        if bullet:
            lines.append(f"{bullet.group(1)}• {_inline(line[bullet.end():])}")
        else:
            lines.append(_inline(line))
    return "\n".join(lines)


def _inline(text: str) -> str:
    """Inline code, links and emphasis within one line, recursively for nesting."""
    out: list[str] = []
    unpaired: dict[str, int] = {}
    i = 0
    while i < len(text):
        converted, i = _inline_at(text, i, unpaired)
        out.append(converted)
    return "".join(out)


def _inline_at(text: str, i: int, unpaired: dict[str, int]) -> tuple[str, int]:
    """Convert the construct starting at `i` (or one literal character); return the end.

    `unpaired[d]` remembers the first position from which delimiter `d` found no closer,
    so a line full of stray `*` stays linear instead of rescanning the rest each time.
    """
    char = text[i]
    if char == "`":
        run = _run_length(text, i, "`")
        close = _find_backtick_run(text, i + run, run)
        if close < 0:
            return escape(text[i:i + run]), i + run
        return f"<code>{escape(text[i + run:close])}</code>", close + run
    if char == "[" and (link := _LINK.match(text, i)):
        url = html.escape(link.group(2), quote=True)
        return f'<a href="{url}">{_inline(link.group(1))}</a>', link.end()
    for delimiter, tags in _EMPHASIS:
        if text.startswith(delimiter, i):
            close = -1 if i >= unpaired.get(delimiter, len(text)) else _find_close(
                text, i, delimiter)
            if close < 0:
                unpaired[delimiter] = min(i, unpaired.get(delimiter, i))
                return escape(delimiter), i + len(delimiter)
            inner = _inline(text[i + len(delimiter):close])
            opening = "".join(f"<{tag}>" for tag in tags)
            closing = "".join(f"</{tag}>" for tag in reversed(tags))
            return f"{opening}{inner}{closing}", close + len(delimiter)
    return escape(char), i + 1


def _run_length(text: str, i: int, char: str) -> int:
    end = i
    while end < len(text) and text[end] == char:
        end += 1
    return end - i


def _find_backtick_run(text: str, start: int, run: int) -> int:
    """Index of the next run of exactly `run` backticks at or after `start`, or -1."""
    i = text.find("`", start)
    while i >= 0:
        length = _run_length(text, i, "`")
        if length == run:
            return i
        i = text.find("`", i + length)
    return -1


def _find_close(text: str, start: int, delimiter: str) -> int:
    """Where the emphasis opened at `start` closes, or -1 if it does not pair up.

    Like CommonMark (simplified): the content may not start or end with a space, `_` only
    works at word boundaries (so snake_case survives), a single `*` does not close on half
    of a `**`, and code spans inside are skipped.
    """
    size = len(delimiter)
    opener_end = start + size
    if opener_end >= len(text) or text[opener_end].isspace():
        return -1
    if delimiter[0] == "_" and start > 0 and text[start - 1].isalnum():
        return -1
    i = opener_end + 1
    while i < len(text):
        if text[i] == "`":
            run = _run_length(text, i, "`")
            close = _find_backtick_run(text, i + run, run)
            i = close + run if close >= 0 else i + run
            continue
        if text.startswith(delimiter, i) and _closes(text, i, delimiter):
            return i
        i += _run_length(text, i, delimiter[0]) if text[i] == delimiter[0] else 1
    return -1


def _closes(text: str, i: int, delimiter: str) -> bool:
    size = len(delimiter)
    if text[i - 1].isspace():
        return False
    if size < 3 and _run_length(text, i, delimiter[0]) > size:
        return False  # part of a longer run (`**` for `*`): that is another delimiter
    after = text[i + size:i + size + 1]
    return not (delimiter[0] == "_" and after.isalnum())


def utf16_length(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units): the adapter's limits measure text by
    it, so an emoji-heavy reply is split under 4,096 units, not characters."""
    return len(text.encode("utf-16-le")) // 2


# -- outbound parameters -----------------------------------------------------------------


def int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def chat_ref(chat_id: str) -> int | str:
    """Numeric ids as ints; `@channelname` stays a string."""
    number = int_or_none(chat_id)
    return chat_id if number is None else number


def send_options(message: OutboundMessage) -> dict[str, Any]:
    """Reply and topic parameters. A reply target that is not a Telegram message id (e.g.
    a reaction event) is dropped, and a deleted target does not block the answer."""
    options: dict[str, Any] = {}
    reply_to = int_or_none(message.reply_to)
    if reply_to is not None:
        options["reply_parameters"] = ReplyParameters(message_id=reply_to,
                                                      allow_sending_without_reply=True)
    thread = int_or_none(message.thread_id)
    if thread is not None:
        options["message_thread_id"] = thread
    return options


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 // 10 else f"{size:,} bytes"



# -- inbound ---------------------------------------------------------------------------------


@dataclass
class UpdateParser:
    """Turns raw updates into `InboundMessage`s for the bot `bot_id` / `@bot_username`.

    `sent` holds `(chat_id, message_id)` of the bot's recent messages, so a reaction to one
    of them counts as addressed to the bot. Raises on malformed updates (the caller skips
    them); returns None for updates that are valid but carry nothing to answer.
    """

    bot_id: int
    bot_username: str
    bot: Bot | None = None
    sent: Container[tuple[str, str]] = field(default_factory=frozenset)
    provider: str = "telegram"

    def parse(self, raw: Any) -> InboundMessage | None:
        if not isinstance(raw, dict):
            raise TypeError(f"an update must be an object, not {type(raw).__name__}")
        update = Update.de_json(raw, self.bot)
        if update.message_reaction is not None:
            return self._reaction(update.message_reaction, update.update_id)
        if update.message is not None:
            return self._message(update.message)
        raise ValueError("unexpected update kind: "
                         + (", ".join(sorted(k for k in raw if k != "update_id")) or "empty"))

    def _message(self, message: Message) -> InboundMessage | None:
        user, chat = message.from_user, message.chat
        if user is not None and user.id == self.bot_id:
            return None  # our own message echoed back (e.g. via a channel or a business chat)
        text = message.text or message.caption or ""
        if len(text) > _MAX_INBOUND_TEXT:
            raise ValueError(f"text of {len(text):,} characters exceeds any Telegram limit")
        attachments = _attachments(message)
        if not text and not attachments:
            return None
        # anonymous admins and linked channels post "as a chat" (from is a service bot)
        sender = message.sender_chat or user or chat
        is_direct = chat.type == ChatType.PRIVATE
        return InboundMessage(
            provider=self.provider, chat_id=str(chat.id), message_id=str(message.message_id),
            sender_id=str(sender.id), sender_name=_display_name(sender),
            text=self._strip_mention(text), attachments=attachments,
            thread_id=str(message.message_thread_id)
            if message.is_topic_message and message.message_thread_id else None,
            is_direct=is_direct, is_mention=is_direct or self._addressed(message, text),
            from_bot=bool(user and user.is_bot and message.sender_chat is None))

    def _addressed(self, message: Message, text: str) -> bool:
        """In groups the bot answers only when @mentioned, replied to, or commanded."""
        replied = message.reply_to_message
        if replied and replied.from_user and replied.from_user.id == self.bot_id:
            return True
        name = self.bot_username.casefold()
        entities = message.parse_entities() if message.text else message.parse_caption_entities()
        for entity, value in entities.items():
            if entity.type == MessageEntityType.MENTION and value[1:].casefold() == name:
                return True
            if entity.type == MessageEntityType.TEXT_MENTION and entity.user is not None \
                    and entity.user.id == self.bot_id:
                return True
        command = re.match(r"/\w+(?:@(\w+))?(?!\S)", text)
        if command:
            return command.group(1) is None or command.group(1).casefold() == name
        return not entities and bool(self._mention_pattern().search(text))

    def _mention_pattern(self) -> re.Pattern[str]:
        return re.compile(rf"(?<![\w@])@{re.escape(self.bot_username)}(?!\w)", re.IGNORECASE)

    def _strip_mention(self, text: str) -> str:
        """`@bot what's up` → `what's up`: the agent does not need its own handle."""
        if not self.bot_username:
            return text
        leading = re.compile(rf"^\s*@{re.escape(self.bot_username)}(?!\w)[\s,:;]*", re.I)
        return leading.sub("", text, count=1)

    def _reaction(self, event: MessageReactionUpdated, update_id: int) -> InboundMessage | None:
        """A newly added emoji; removals (and custom-emoji-only changes) are ignored."""
        old = {r.emoji for r in event.old_reaction if isinstance(r, ReactionTypeEmoji)}
        added = [r.emoji for r in event.new_reaction
                 if isinstance(r, ReactionTypeEmoji) and r.emoji not in old]
        if not added or (event.user is not None and event.user.id == self.bot_id):
            return None
        sender = event.user or event.actor_chat or event.chat
        chat_id, target = str(event.chat.id), str(event.message_id)
        is_direct = event.chat.type == ChatType.PRIVATE
        return InboundMessage(
            provider=self.provider, chat_id=chat_id, message_id=f"reaction-{update_id}",
            sender_id=str(sender.id), sender_name=_display_name(sender), text="",
            kind="reaction", reaction=added[0], target_message_id=target, is_direct=is_direct,
            is_mention=is_direct or (chat_id, target) in self.sent,
            from_bot=bool(event.user and event.user.is_bot))


def _attachments(message: Message) -> list[Attachment]:
    found: list[Attachment] = []
    if message.document is not None:
        doc = message.document
        found.append(Attachment(name=doc.file_name or f"document_{message.message_id}",
                                file_id=doc.file_id, mime_type=doc.mime_type,
                                size=doc.file_size))
    if message.photo:
        photo = max(message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        found.append(Attachment(name=f"photo_{message.message_id}.jpg", file_id=photo.file_id,
                                mime_type="image/jpeg", size=photo.file_size))
    for kind in _MEDIA_KINDS:  # a GIF also arrives as `document`: list each file once
        media = getattr(message, kind, None)
        if media is not None and all(a.file_id != media.file_id for a in found):
            name = getattr(media, "file_name", None) or f"{kind}_{message.message_id}"
            found.append(Attachment(name=name, file_id=media.file_id,
                                    mime_type=getattr(media, "mime_type", None),
                                    size=media.file_size))
    return found


def _display_name(sender: Any) -> str:
    """A user's full name, or a chat's title, or its @username."""
    return (getattr(sender, "full_name", None) or getattr(sender, "title", None)
            or getattr(sender, "username", None) or "")
