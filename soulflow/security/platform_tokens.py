"""Detectors for the chat platforms' own bot tokens: Telegram and Discord.

Neither token has a literal prefix a regex engine could skip ahead to (a Telegram token opens
with digits, a Discord one with base64), and the redactor runs on every log line, so both
pivot on the one character that every token holds and most text holds rarely next to the
right shape: the ``:`` of ``<bot id>:<35 chars>`` and the first ``.`` of
``<base64 id>.<6-7>.<27+>``. The right side is found by a pattern that opens with that
literal, which the regex engine searches for in C; only then is the left side walked back
and checked. A plain pattern would be tried at every digit / every letter of every log line.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass

from soulflow.security.detection import Detection

_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")

# the colon and exactly 35 token chars, then not another token char
_TELEGRAM_TAIL = re.compile(r":[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])")
# the first dot, the 6-7 char timestamp, a dot, the 27-40 char HMAC
_DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}(?![A-Za-z0-9_\-.])")


def _walk_back(text: str, end: int, allowed: frozenset[str], limit: int) -> int:
    """The start of the run of ``allowed`` characters ending at ``end`` (at most ``limit``
    plus one characters back, so an overlong run is noticed)."""
    start = end
    while start > 0 and end - start <= limit and text[start - 1] in allowed:
        start -= 1
    return start


@dataclass(frozen=True, slots=True)
class TelegramBotTokenDetector:
    """``<6-12 digit bot id>:<35 chars>``; may be glued to ``bot`` in Bot API URLs
    (``/bot<token>/getMe``), so only a digit may not precede it."""

    name: str = "telegram_bot_token"
    type: str = "telegram_bot_token"

    def scan(self, text: str, lowered: str) -> Iterator[Detection]:
        for tail in _TELEGRAM_TAIL.finditer(text):  # a tail holds no ':', so none overlap
            pos = tail.start()
            start = _walk_back(text, pos, _DIGITS, 12)
            if 6 <= pos - start <= 12 and (start == 0 or text[start - 1] not in _DIGITS):
                yield Detection(self.type, start, tail.end())


@dataclass(frozen=True, slots=True)
class DiscordBotTokenDetector:
    """``base64(numeric bot id).<timestamp>.<hmac>``: the first part must decode to the 15-21
    digit id, which is what tells a token from any other dotted base64 (a JWT opens with
    ``eyJ``, the base64 of ``{"``)."""

    name: str = "discord_bot_token"
    type: str = "discord_bot_token"

    def scan(self, text: str, lowered: str) -> Iterator[Detection]:
        tail = _DISCORD_TAIL.search(text)
        while tail is not None:
            pos = tail.start()
            start = _walk_back(text, pos, _TOKEN_CHARS, 32)
            if 20 <= pos - start <= 32 and (start == 0 or text[start - 1] != ".") \
                    and _is_numeric_id(text[start:pos]):
                yield Detection(self.type, start, tail.end())
                tail = _DISCORD_TAIL.search(text, tail.end())
            else:  # a failed candidate may hide the next one's first dot: step one char
                tail = _DISCORD_TAIL.search(text, pos + 1)


def _is_numeric_id(part: str) -> bool:
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        return False
    return decoded.isdigit() and 15 <= len(decoded) <= 21
