"""An aiohttp response whose JSON survives invalid UTF-8: bad bytes become U+FFFD.

aiohttp decodes a JSON body strictly, so one message holding a byte that is not UTF-8 made
every read of its channel raise before any of SoulFlow's own checks ran; with history
polling the cursor never moved past it, and the channel was wedged for good. Decoding with
`errors="replace"` turns the bytes into U+FFFD, which the edge normalisation then accepts
like any other text (python-telegram-bot does the same for Telegram).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class LenientResponse(aiohttp.ClientResponse):
    """JSON and text bodies with U+FFFD for bytes that are not UTF-8 (Slack reads `.json()`,
    discord.py reads `.text(encoding="utf-8")`)."""

    async def text(self, encoding: str | None = None, errors: str = "replace") -> str:
        return await super().text(encoding=encoding, errors=errors)

    async def json(self, *, encoding: str | None = None, loads: Any = json.loads,
                   content_type: str | None = "application/json") -> Any:
        try:
            return await super().json(encoding=encoding, loads=loads, content_type=content_type)
        except UnicodeDecodeError:
            body = self._body or b""
            return loads(body.decode(encoding or "utf-8", "replace"))
