"""Telegram ``parse_mode`` handling: turn HTML / MarkdownV2 / Markdown into text + entities.

The real Bot API rejects malformed markup with ``400 Bad Request: can't parse entities:
...``; that is the most common production failure of chat adapters, so the fake
reproduces the main rules (reserved characters, unbalanced tags, unclosed entities)
rather than accepting anything. Entity offsets/lengths are in UTF-16 code units and
error offsets are UTF-8 byte offsets, as in the real server. Known simplifications:
``**>`` expandable blockquotes and nested-entity restrictions are not modelled.
"""

from __future__ import annotations

import re
from typing import Any

PREFIX = "Bad Request: can't parse entities: "


class MarkupError(ValueError):
    """Raised with the exact ``description`` the Bot API would return."""

    def __init__(self, reason: str, *, prefixed: bool = True) -> None:
        self.description = PREFIX + reason if prefixed else reason
        super().__init__(self.description)


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit Telegram uses for entity offsets."""
    return len(text.encode("utf-16-le")) // 2


def byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


class _Builder:
    """Accumulates plain output text and the entities that cover it."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.offset = 0  # UTF-16 offset of the end of the output
        self.entities: list[dict[str, Any]] = []

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.offset += utf16_len(text)

    def entity(self, kind: str, start: int, **extra: Any) -> None:
        """Close an entity that began at UTF-16 offset ``start``; empty ones are dropped."""
        if self.offset > start:
            self.entities.append({"type": kind, "offset": start, "length": self.offset - start})
            self.entities[-1].update({k: v for k, v in extra.items() if v is not None})

    def result(self) -> tuple[str, list[dict[str, Any]]]:
        ordered = sorted(self.entities, key=lambda e: (e["offset"], -e["length"]))
        return "".join(self.parts), ordered


def parse_markup(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Return ``(plain_text, entities)`` for ``text`` formatted with ``parse_mode``."""
    mode = (parse_mode or "").lower()
    if not mode:
        return text, []
    if mode == "html":
        return _parse_html(text)
    if mode == "markdownv2":
        return _parse_markdown_v2(text)
    if mode == "markdown":
        return _parse_markdown(text)
    raise MarkupError("Bad Request: unsupported parse_mode", prefixed=False)


# -- HTML ----------------------------------------------------------------------------------
_HTML_TAGS = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
    "del": "strikethrough", "tg-spoiler": "spoiler", "span": "spoiler", "a": "text_link",
    "code": "code", "pre": "pre", "blockquote": "blockquote", "tg-emoji": "custom_emoji",
}  # fmt: skip
_HTML_ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d{1,7}|#x[0-9a-fA-F]{1,6});")
_HTML_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_TAG_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*")
_ATTRIBUTE = re.compile(r"""([a-zA-Z-]+)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)""")


def _html_entity(match: re.Match[str]) -> str:
    name = match.group(1)
    if name.startswith("#x"):
        return chr(int(name[2:], 16))
    if name.startswith("#"):
        return chr(int(name[1:]))
    return _HTML_NAMED[name]


def _parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Builder()
    stack: list[tuple[str, int, dict[str, str]]] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "&" and (match := _HTML_ENTITY.match(text, i)):
            out.add(_html_entity(match))
            i = match.end()
        elif char != "<":
            out.add(char)
            i += 1
        elif text.startswith("</", i):
            i = _html_end_tag(text, i, stack, out)
        else:
            i = _html_start_tag(text, i, stack, out)
    if stack:
        raise MarkupError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    return out.result()


def _html_start_tag(text: str, i: int, stack: list[Any], out: _Builder) -> int:
    name_match = _TAG_NAME.match(text, i + 1)
    name = name_match.group(0).lower() if name_match else ""
    close = text.find(">", i)
    attrs_text = text[name_match.end() : close] if name_match and close > 0 else ""
    attrs = {k.lower(): v.strip("\"'") for k, v in _ATTRIBUTE.findall(attrs_text)}
    if name not in _HTML_TAGS or (name == "span" and attrs.get("class") != "tg-spoiler"):
        raise MarkupError(f'Unsupported start tag "{name}" at byte offset {byte_offset(text, i)}')
    if close < 0:
        raise MarkupError(f"Can't find end of tag at byte offset {byte_offset(text, i)}")
    stack.append((name, out.offset, attrs))
    return close + 1


def _html_end_tag(text: str, i: int, stack: list[Any], out: _Builder) -> int:
    close = text.find(">", i)
    if close < 0:
        raise MarkupError(f"Can't find end of tag at byte offset {byte_offset(text, i)}")
    name = text[i + 2 : close].strip().lower()
    if not stack:
        raise MarkupError(f"Unexpected end tag at byte offset {byte_offset(text, i)}")
    open_name, start, attrs = stack.pop()
    if name != open_name:
        raise MarkupError(
            f'Unmatched end tag at byte offset {byte_offset(text, i)}, expected "</{open_name}>", '
            f'found "</{name}>"'
        )
    kind = _HTML_TAGS[name]
    language = attrs.get("class", "")
    if name == "code" and stack and stack[-1][0] == "pre" and language.startswith("language-"):
        stack[-1][2]["language"] = language.removeprefix("language-")
    elif kind == "text_link":
        out.entity(kind, start, url=attrs.get("href"))
    elif kind == "custom_emoji":
        out.entity(kind, start, custom_emoji_id=attrs.get("emoji-id"))
    elif kind == "pre":
        out.entity(kind, start, language=attrs.get("language"))
    elif not (name == "code" and stack and stack[-1][0] == "pre"):
        out.entity(kind, start)
    return close + 1


# -- MarkdownV2 ----------------------------------------------------------------------------
_RESERVED_V2 = set("_*[]()~`>#+-=|{}.!")
_V2_NAMES = {
    "bold": "Bold", "italic": "Italic", "underline": "Underline", "strikethrough":
    "Strikethrough", "spoiler": "Spoiler", "code": "Code", "pre": "Pre", "text_link":
    "TextUrl", "custom_emoji": "CustomEmoji",
}  # fmt: skip


def _v2_closes(kind: str, text: str, i: int) -> bool:
    """Whether the reserved character at ``i`` ends the innermost open entity ``kind``."""
    char, nxt = text[i], text[i + 1 : i + 2]
    return {
        "bold": char == "*",
        "italic": char == "_" and nxt != "_",
        "underline": text.startswith("__", i),
        "strikethrough": char == "~",
        "spoiler": text.startswith("||", i),
        "code": char == "`",
        "pre": text.startswith("```", i),
        "text_link": char == "]",
        "custom_emoji": char == "]",
    }[kind]


def _v2_opens(text: str, i: int) -> tuple[str, int] | None:
    """Entity kind opened at ``i`` and the index after its marker, or None if invalid."""
    if text.startswith("```", i):
        newline = text.find("\n", i + 3)
        return ("pre", newline + 1) if newline >= 0 else ("pre", i + 3)
    markers = (
        ("__", "underline"), ("||", "spoiler"), ("![", "custom_emoji"), ("*", "bold"),
        ("_", "italic"), ("~", "strikethrough"), ("[", "text_link"), ("`", "code"),
    )  # fmt: skip
    for marker, kind in markers:
        if text.startswith(marker, i):
            return kind, i + len(marker)
    return None


def _v2_url(text: str, i: int) -> tuple[str | None, int]:
    """Parse ``(url)`` right after a closing ``]``; ``\\`` escapes ``)`` and ``\\``."""
    if text[i : i + 1] != "(":
        return None, i
    chars: list[str] = []
    j = i + 1
    while j < len(text) and text[j] != ")":
        if text[j] == "\\" and j + 1 < len(text):
            j += 1
        chars.append(text[j])
        j += 1
    if j >= len(text):
        raise MarkupError(f"Can't find end of a URL at byte offset {byte_offset(text, i)}")
    return "".join(chars), j + 1


def _parse_markdown_v2(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Builder()
    stack: list[tuple[str, int, int, str | None]] = []  # kind, utf16 start, index, language
    quote_start: int | None = None
    i = 0
    while i < len(text):
        char = text[i]
        line_start = i == 0 or text[i - 1] == "\n"
        if char == "\n" and quote_start is not None and not text.startswith(">", i + 1):
            out.entity("blockquote", quote_start)
            quote_start = None
        if char == "\\" and i + 1 < len(text) and 0 < ord(text[i + 1]) <= 126:
            out.add(text[i + 1])
            i += 2
            continue
        in_code = bool(stack) and stack[-1][0] in ("code", "pre")
        if char not in _RESERVED_V2 or (in_code and not _v2_closes(stack[-1][0], text, i)):
            out.add(char)
            i += 1
            continue
        if char == ">" and line_start and not stack:
            quote_start = out.offset if quote_start is None else quote_start
            i += 1
            continue
        if stack and _v2_closes(stack[-1][0], text, i):
            i = _v2_close(text, i, stack, out)
            continue
        opened = _v2_opens(text, i)
        if opened is None:
            raise MarkupError(
                f"Character '{char}' is reserved and must be escaped with the preceding '\\'"
            )
        kind, after = opened
        language = text[i + 3 : after - 1].strip() or None if kind == "pre" else None
        stack.append((kind, out.offset, i, language))
        i = after
    if stack:
        kind, _, index, _ = stack[-1]
        raise MarkupError(
            f"Can't find end of {_V2_NAMES[kind]} entity at byte offset {byte_offset(text, index)}"
        )
    if quote_start is not None:
        out.entity("blockquote", quote_start)
    return out.result()


def _v2_close(text: str, i: int, stack: list[Any], out: _Builder) -> int:
    kind, start, _, language = stack.pop()
    width = {"underline": 2, "spoiler": 2, "pre": 3}.get(kind, 1)
    after = i + width
    if kind == "text_link":
        url, after = _v2_url(text, after)
        if url:
            out.entity(kind, start, url=url)
    elif kind == "custom_emoji":
        url, after = _v2_url(text, after)
        emoji_id = (url or "").partition("id=")[2]
        if not emoji_id:
            raise MarkupError("Custom emoji entity must contain a tg://emoji URL")
        out.entity(kind, start, custom_emoji_id=emoji_id)
    else:
        out.entity(kind, start, **({"language": language} if kind == "pre" else {}))
    return after


# -- legacy Markdown ----------------------------------------------------------------------
_LEGACY = {"*": "bold", "_": "italic", "`": "code", "[": "text_link"}


def _parse_markdown(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Builder()
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] in _LEGACY:
            out.add(text[i + 1])
            i += 2
            continue
        if char not in _LEGACY:
            out.add(char)
            i += 1
            continue
        is_pre = text.startswith("```", i)
        marker = "```" if is_pre else ("]" if char == "[" else char)
        end = text.find(marker, i + len(marker))
        if end < 0:
            raise MarkupError(
                f"Can't find end of the entity starting at byte offset {byte_offset(text, i)}"
            )
        start = out.offset
        out.add(text[i + len(marker) : end])
        i = end + len(marker)
        if is_pre:
            out.entity("pre", start)
        elif char == "[":
            url, i = _v2_url(text, i)
            if url:
                out.entity("text_link", start, url=url)
        else:
            out.entity(_LEGACY[char], start)
    return out.result()
