"""Slack data <-> SoulFlow data: text, events, timestamps, error codes, file names.

Everything here is pure (no I/O), so the formats are unit-tested without a network.

Agents write CommonMark-ish Markdown, but Slack renders its own `mrkdwn`: one `*` is bold,
`_` is italic, links are `<url|label>`, and `&`, `<`, `>` must be entity-escaped everywhere
(a raw `<!channel>` in a reply would otherwise ping a whole channel). Inbound text arrives
in that same escaped form, so it is decoded before an agent reads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from soulflow.contracts import Attachment, InboundMessage, SendError

log = logging.getLogger(__name__)

_STASH = "\x00{}\x00"
_STASHED = re.compile("\x00(\\d+)\x00")
_BOLD_MARK = "\x01"  # stands for Slack's `*` until single-star italics are converted

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n`]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)",
                    re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_LINK = re.compile(r"!?\[([^\]\n]*)\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\)[^()\s<>]*)*)>?"
                   r"(?:\s+\"[^\"\n]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^<>\s]+)>")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_BULLET = re.compile(r"^([ \t]*)[*+-][ \t]+(?=\S)", re.MULTILINE)
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<![\w_])__(?=\S)(.+?)(?<=\S)__(?![\w_])")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_QUOTE = re.compile(r"^([ \t]*)((?:&gt;[ \t]?)+)", re.MULTILINE)
_SAFE_URL = re.compile(r"^(?:https?://|mailto:)", re.IGNORECASE)

_INBOUND_LINK = re.compile(r"<((?:https?|mailto|tel):[^|>]*)(?:\|([^>]*))?>")
_INBOUND_CHANNEL = re.compile(r"<#[A-Z0-9]+\|([^>]*)>")
_INBOUND_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")
_TS = re.compile(r"^\d+(?:\.\d+)?$")
PROVIDER = "slack"
#: Normal human messages; edits, deletions, joins, bot_message, ... are not conversation.
MESSAGE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
#: Slack caps messages at 40k characters; anything far beyond that is not a real event.
MAX_EVENT_TEXT = 200_000


def escape(text: str) -> str:
    """Entity-escape the three characters Slack treats as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class _Stash:
    """Holds finished pieces (code, links) out of reach of the emphasis rewrites."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def put(self, rendered: str) -> str:
        self.pieces.append(rendered)
        return _STASH.format(len(self.pieces) - 1)

    def restore(self, text: str) -> str:
        return _STASHED.sub(lambda m: self.pieces[int(m.group(1))], text)


def _link(label: str, url: str) -> str:
    """`<url|label>` for web/mail links; anything else (relative paths) stays readable."""
    label = label.strip()
    if not _SAFE_URL.match(url):
        return escape(f"{label} ({url})" if label else url)
    target = escape(url).replace("|", "%7C")
    return f"<{target}|{escape(label)}>" if label and label != url else f"<{target}>"


def _inner(match: re.Match[str]) -> str:
    return match.group(1) if match.group(1) is not None else match.group(2)


def _code_span(match: re.Match[str]) -> str:
    fence = "```" if len(match.group(1)) == 3 else "`"  # Slack knows only these two
    return f"{fence}{escape(match.group(2))}{fence}"


def _emphasis(text: str) -> str:
    """Headings, bullets, bold, italic and strike on text that is already escaped."""
    text = _HEADING.sub(lambda m: _BOLD_MARK + _BOLD.sub(_inner, m.group(1)) + _BOLD_MARK, text)
    text = _BULLET.sub(r"\1• ", text)
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(1)}_{_BOLD_MARK}", text)
    text = _BOLD.sub(lambda m: _BOLD_MARK + _inner(m) + _BOLD_MARK, text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = _QUOTE.sub(lambda m: m.group(1) + unescape(m.group(2)), text)
    return text.replace(_BOLD_MARK, "*")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Render Markdown as Slack mrkdwn; code is kept verbatim (only entity-escaped)."""
    stash = _Stash()
    text = markdown.replace("\x00", "").replace(_BOLD_MARK, "")
    text = _FENCE.sub(lambda m: stash.put(f"```\n{escape(m.group(2).rstrip(chr(10)))}\n```"),
                      text)
    text = _INLINE_CODE.sub(lambda m: stash.put(_code_span(m)), text)
    text = _LINK.sub(lambda m: stash.put(_link(m.group(1), m.group(2))), text)
    text = _AUTOLINK.sub(lambda m: stash.put(_link("", m.group(1))), text)
    return stash.restore(_emphasis(escape(text)))


def slack_to_plain(text: str) -> str:
    """Decode Slack's inbound markup for an agent: links, channel names, entities.

    User mentions (`<@U123>`) are kept: they are ids the agent may need to answer with.
    """
    def link(match: re.Match[str]) -> str:
        url, label = match.group(1), match.group(2)
        url = url.removeprefix("mailto:") if label and url == f"mailto:{label}" else url
        return url if not label or label == url else f"{label} ({url})"

    replacements: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
        (_INBOUND_LINK, link),
        (_INBOUND_CHANNEL, lambda m: f"#{m.group(1)}"),
        (_INBOUND_SPECIAL, lambda m: f"@{m.group(1)}"),
    ]
    for pattern, replace in replacements:
        text = pattern.sub(replace, text)
    return unescape(text)


# -- timestamps and errors ---------------------------------------------------------------

def ts_key(ts: str) -> tuple[int, int]:
    """Order of Slack `ts` strings (`"1700000000.000100"`), which string order gets wrong."""
    seconds, _, micros = ts.partition(".")
    return int(seconds or 0), int((micros or "0").ljust(6, "0")[:6])


def valid_ts(entry: Any) -> str | None:
    """The `ts` of a message dict, if it is a well-formed one."""
    ts = entry.get("ts") if isinstance(entry, dict) else None
    return ts if isinstance(ts, str) and _TS.match(ts) else None


def newest(*stamps: str | None) -> str | None:
    """The latest of the well-formed `ts` values given (None if there is none)."""
    valid = [ts for ts in stamps if isinstance(ts, str) and _TS.match(ts)]
    return max(valid, key=ts_key) if valid else None


def error_code(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or "unknown_error")


def retry_after(exc: SlackApiError, default: float = 1.0) -> float:
    """Seconds from the `Retry-After` header of a rate-limited reply."""
    for name, value in (exc.response.headers or {}).items():
        if name.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    return default


BOT_TOKEN_REJECTED = frozenset({"invalid_auth", "not_authed", "account_inactive",
                                "token_revoked", "token_expired"})
#: Errors that no retry can fix: the dispatcher sends these straight to the DLQ.
PERMANENT_ERRORS = BOT_TOKEN_REJECTED | {
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text",
    "missing_scope", "restricted_action", "invalid_blocks", "invalid_blocks_format",
    "not_allowed_token_type", "invalid_arguments", "cannot_reply_to_message"}
#: chat.update of a message that is gone (a user deleted it) or that this bot may no longer
#: update: its text goes out as a new message instead.
CANNOT_UPDATE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
#: Rejections of the converted text itself: worth one more try as plain text.
CONTENT_ERRORS = frozenset({"msg_too_long", "invalid_blocks", "invalid_blocks_format", "no_text"})


def api_send_error(exc: SlackApiError) -> SendError:
    """Classify a Web API failure for the dispatcher: wait, retry, or give up."""
    code, status = error_code(exc), exc.response.status_code
    if status == 429 or code == "ratelimited":
        wait = retry_after(exc)
        return SendError(f"Slack rate limit; retry after {wait:g}s", retry_after=wait)
    return SendError(f"Slack rejected the request: {code} (HTTP {status})",
                     permanent=code in PERMANENT_ERRORS)


# -- events ------------------------------------------------------------------------------

@dataclass
class SlackEventParser:
    """Turns Events API payloads and history entries into `InboundMessage`s.

    Returns None for anything that is not a human (or other bot's) conversation message or
    reaction: the bot's own echoes, edits, joins, unknown types, and malformed payloads
    (logged), so one bad event never stops the ones after it.
    """

    bot_user_id: str
    bot_id: str | None = None
    _mention: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._mention = re.compile(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>[ \t]?")

    def parse(self, event: Any, *, channel: str | None = None,
              priming: bool = False) -> InboundMessage | None:
        """`channel` is given for history entries, which do not name their channel."""
        try:
            kind = event.get("type", "message") if channel else event.get("type")
            if kind in ("message", "app_mention"):
                return self._message(event, channel or event["channel"], priming)
            if kind == "reaction_added":
                return self._reaction(event)
            log.debug("slack: ignoring event type %r", kind)
        except (AttributeError, LookupError, TypeError, ValueError) as exc:
            log.warning("slack: skipping a malformed event (%s: %s)", type(exc).__name__, exc)
        return None

    def is_own(self, event: dict[str, Any]) -> bool:
        bot_id = event.get("bot_id")
        return event.get("user") == self.bot_user_id or bool(bot_id and bot_id == self.bot_id)

    def _message(self, event: dict[str, Any], channel: str, priming: bool
                 ) -> InboundMessage | None:
        if (event.get("subtype") not in MESSAGE_SUBTYPES or event.get("hidden")
                or self.is_own(event)):
            return None
        ts, text = _text_field(event, "ts"), event.get("text") or ""
        sender = event.get("user") or event.get("bot_id")
        if not isinstance(channel, str) or not channel or not isinstance(text, str):
            raise ValueError("message event without channel/text")
        if not isinstance(sender, str) or not sender:
            raise ValueError("message event without a sender")
        if len(text) > MAX_EVENT_TEXT:
            raise ValueError(f"text of {len(text):,} characters")
        direct = channel.startswith("D") or event.get("channel_type") == "im"
        mentioned = bool(self._mention.search(text)) or event.get("type") == "app_mention"
        thread_ts = event.get("thread_ts")
        return InboundMessage(
            provider=PROVIDER, chat_id=channel, message_id=ts, sender_id=sender,
            text=slack_to_plain(self._mention.sub("", text)).strip(),
            thread_id=thread_ts if isinstance(thread_ts, str) and thread_ts != ts else None,
            is_mention=mentioned or direct, is_direct=direct,
            from_bot=bool(event.get("bot_id")), attachments=_attachments(event.get("files")),
            platform_data={"ts": ts}, priming=priming)

    def _reaction(self, event: dict[str, Any]) -> InboundMessage | None:
        item, user = event["item"], _text_field(event, "user")
        if item.get("type") != "message" or user == self.bot_user_id:
            return None
        channel, ts = _text_field(item, "channel"), _text_field(item, "ts")
        reaction, event_ts = _text_field(event, "reaction"), str(event.get("event_ts", ""))
        direct = channel.startswith("D")
        return InboundMessage(
            provider=PROVIDER, chat_id=channel, sender_id=user, text=f":{reaction}:",
            message_id=f"reaction-{ts}-{user}-{reaction}-{event_ts}", kind="reaction",
            reaction=reaction, target_message_id=ts, is_direct=direct,
            is_mention=direct or event.get("item_user") == self.bot_user_id,
            platform_data={"ts": event_ts, "item_user": event.get("item_user")})


def _text_field(data: dict[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str) or not value:
        raise ValueError(f"field {name!r} is not a non-empty string")
    return value


def _attachments(files: Any) -> list[Attachment]:
    """Slack file objects → attachments; entries without an id (tombstones) are skipped."""
    if not files:
        return []
    if not isinstance(files, list):
        raise TypeError("files is not a list")
    found = []
    for file in files:
        if not isinstance(file, dict) or not file.get("id"):
            continue
        size = file.get("size")
        found.append(Attachment(
            name=str(file.get("name") or file.get("title") or file["id"]),
            url=file.get("url_private_download") or file.get("url_private"),
            file_id=str(file["id"]), mime_type=file.get("mimetype"),
            size=size if isinstance(size, int) else None))
    return found


THREAD_CONTEXT_LINES = 10  # earlier thread messages given to the agent with a mention


def thread_context_lines(replies: list[Any], *, exclude_ts: str,
                         limit: int = THREAD_CONTEXT_LINES) -> list[str]:
    """`user: text` lines for the last `limit` messages of a thread, minus `exclude_ts`."""
    earlier = [m for m in replies if isinstance(m, dict) and m.get("ts") != exclude_ts
               and m.get("text")]
    return [f"{m.get('user') or m.get('bot_id') or '?'}: {slack_to_plain(str(m['text']))}"
            for m in earlier[-limit:]]
