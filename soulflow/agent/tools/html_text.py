"""HTML to readable plain text with only the standard library.

A model reading a web page needs its words and rough structure, not markup: scripts, styles
and other invisible content are dropped, block elements become line breaks, list items get a
dash, and whitespace is collapsed the way a browser would (except inside ``<pre>``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_INVISIBLE = frozenset(
    {"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas"}
)
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tr", "ul",
    }
)  # fmt: skip
_ITEMS = frozenset({"li", "tr", "dt", "dd"})  # a line break before each item is enough
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._hidden_depth = 0
        self._pre_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _INVISIBLE and tag not in _VOID:
            self._hidden_depth += 1
        elif tag == "pre":
            self._pre_depth += 1
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag == "li" and not self._hidden_depth:
            self.parts.append("- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _INVISIBLE and self._hidden_depth:
            self._hidden_depth -= 1
        elif tag == "pre" and self._pre_depth:
            self._pre_depth -= 1
        if tag in _BLOCK and tag not in _ITEMS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif self._hidden_depth:
            return
        elif self._pre_depth:
            self.parts.append(data)
        else:
            self.parts.append(_SPACES.sub(" ", data.replace("\n", " ")))


def html_to_text(html: str) -> str:
    """Readable text of an HTML document, prefixed with its title when it has one."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = [_trim(line) for line in "".join(parser.parts).split("\n")]
    body = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    title = " ".join("".join(parser.title).split())
    return f"# {title}\n\n{body}" if title else body


def _trim(line: str) -> str:
    """Drop trailing space and the single space whitespace-collapsing leaves at a line start;
    deeper indentation can only come from ``<pre>`` and is kept."""
    line = line.rstrip()
    return line[1:] if line.startswith(" ") and not line.startswith("  ") else line
