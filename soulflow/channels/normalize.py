"""Text normalisation at the edge: one rule for every platform, before anything is stored.

Platforms deliver text that Python accepts but UTF-8 cannot encode (a lone surrogate such as
`"\\ud800"` is valid JSON), or control characters that break terminals and log viewers. One
such message used to raise while it was journaled and wedge its channel for good. Every text
field of an `InboundMessage` passes through `normalize_inbound` first: lone surrogates become
U+FFFD, control characters other than newline and tab are dropped, `\\r\\n` becomes `\\n`.
"""

from __future__ import annotations

import re
from typing import Any

from soulflow.contracts import InboundMessage

REPLACEMENT = "\ufffd"
# C0 controls except \t (09) and \n (0a), DEL, C1 controls; \r is handled separately
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ATTACHMENT_TEXT_FIELDS = ("name", "local_path", "url", "mime_type", "file_id")


def normalize_text(text: str) -> str:
    """`text` made safe to encode and store: surrogates replaced, controls removed.

    Fast path: plain text (the common case) is returned unchanged after two regex scans.
    """
    if not text:
        return text
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(REPLACEMENT, text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _CONTROL.search(text):
        text = _CONTROL.sub("", text)
    return text


def normalize_value(value: Any, depth: int = 0) -> Any:
    """Normalise every string in a JSON-like value (keys too); deeper than 20 levels is cut."""
    if isinstance(value, str):
        return normalize_text(value)
    if depth > 20:
        return None
    if isinstance(value, dict):
        return {normalize_text(str(k)): normalize_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize_value(v, depth + 1) for v in value]
    return value


def scrub_surrogates(value: Any, depth: int = 0) -> Any:
    """A platform's raw update with lone surrogates replaced, nothing else changed.

    For adapters whose parsing itself chokes on them (Telegram counts UTF-16 offsets): U+FFFD
    is one UTF-16 unit like the surrogate it replaces, so entity offsets stay right.
    """
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value) if _SURROGATE.search(value) else value
    if depth > 50:
        return value
    if isinstance(value, dict):
        return {k: scrub_surrogates(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_surrogates(v, depth + 1) for v in value]
    return value


def normalize_inbound(message: InboundMessage) -> InboundMessage:
    """Normalise every text-bearing field of `message` in place (and return it)."""
    message.text = normalize_text(message.text)
    message.sender_name = normalize_text(message.sender_name)
    message.sender_id = normalize_text(message.sender_id)
    message.chat_id = normalize_text(message.chat_id)
    message.message_id = normalize_text(message.message_id)
    if message.thread_id is not None:
        message.thread_id = normalize_text(message.thread_id)
    if message.reaction is not None:
        message.reaction = normalize_text(message.reaction)
    if message.target_message_id is not None:
        message.target_message_id = normalize_text(message.target_message_id)
    for attachment in message.attachments:
        for field in _ATTACHMENT_TEXT_FIELDS:
            value = getattr(attachment, field)
            if isinstance(value, str):
                setattr(attachment, field, normalize_text(value))
    if message.thread_context is not None:
        message.thread_context = tuple(normalize_text(line) for line in message.thread_context)
    message.platform_data = normalize_value(message.platform_data)
    return message
