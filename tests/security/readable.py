"""A test oracle: can a value still be read from some text? It decodes (every base64 and hex
alignment, percent-decoding, whitespace ignored) instead of listing forms, so it does not
share the blind spots of the code under test."""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, unquote_plus


def readable_forms(text: str, value: str) -> list[str]:
    """How ``value`` can still be read from ``text``: an oracle that decodes instead of
    listing forms (whitespace ignored, every base64 and hex alignment tried)."""
    squeezed = "".join(text.split())
    data = value.encode()
    found = [kind for kind, form in (("plain", value), ("reversed", value[::-1]),
                                      ("other case", value.upper()), ("other case", value.lower()))
             if form in squeezed]
    if value in unquote_plus(squeezed) or value in unquote(squeezed):
        found.append("url")
    for run in re.findall(r"[0-9A-Fa-f]+", squeezed):
        if any(data in bytes.fromhex(run[i:][: (len(run) - i) // 2 * 2]) for i in (0, 1)):
            found.append("hex")
    for run in re.findall(r"[A-Za-z0-9+/_-]+", squeezed):
        run = run.translate(str.maketrans("-_", "+/"))
        for skip in range(4):
            part = run[skip:]
            part = part[: len(part) - (len(part) % 4 == 1)]  # a lone last char decodes nothing
            if part and data in base64.b64decode(part + "=" * (-len(part) % 4)):
                found.append("base64")
    return found
