"""Finding a secret in tool output after code has transformed it.

Exact masking (`soulflow.security.resolve.mask_known_secrets`) finds a value as it is. Code
that runs with a secret (`exec`, `python_repl`) can print it in another form - `rev`,
`base64`, `xxd -p`, `od -An -tx1`, `tr a-z A-Z`, `urllib.parse.quote` - and the model would read
it. `TransformedSecrets` looks for these forms of a set of values and blanks them:

* the value reversed, or in other letter case;
* the hex of its UTF-8 bytes, lower or upper case;
* its base64, standard or URL-safe, padded or not: for each of the three byte alignments at
  which the value can sit inside a longer base64 string, the characters that depend on the
  value alone (the *core*). A hit blanks the whole base64 run around the core, because the
  characters at its edges still carry a few bits of the value;
* its percent-encoding: of every character, or of the reserved ones only as Python's
  `quote`/`quote_plus` and JavaScript's `encodeURIComponent`/`encodeURI` leave them;
* any of these, and the value itself, split by whitespace (`base64` wraps at 76 columns,
  `xxd -p` at 60, `od -An -tx1` puts spaces between bytes, `fold -w1` puts one character on
  each line).

How: the output is *normalised* once - whitespace dropped, letters lower-cased, ``-`` and ``_``
read as ``+`` and ``/`` (so one needle covers both cases of hex and both base64 alphabets) -
and each form, normalised the same way, is one substring test: a few per value when the output
holds none of them. Where a hit lies in the output is worked out only then. Forms shorter than
`SPLIT_MIN_LENGTH` once normalised (those of values of 4 to 7 characters) are looked for only
as printed: joining words would find them by chance. `bench/redact_forms.py` measures the cost.

What this cannot catch: a value cut into pieces (`cut -c`), spread over lines that carry other
text as well (`od -c` and `xxd` print offsets and columns), or re-encoded any other way (base32,
rot13, a reversed base64, compression, arithmetic). Approval is the guard there: a call that
runs code with a secret waits for the user (`soulflow.agent.tools.code_secrets`).
"""

from __future__ import annotations

import base64
import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote, quote_plus

from soulflow.security.syntax import REDACTED, splice

MIN_VALUE_LENGTH = 4
"""Values shorter than this are not looked for (as in exact masking: "yes" is everywhere)."""
MIN_FORM_LENGTH = 5
"""A base64 core shorter than this (a 4-character value at one alignment) is left out."""
SPLIT_MIN_LENGTH = 8
"""Forms at least this long once normalised are found split by whitespace and in any case."""

_WHITESPACE = " \t\n\r\f\v"
_NORMALISE = str.maketrans({**dict.fromkeys(map(ord, _WHITESPACE)),
                            **{ord(c): c.lower() for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
                            ord("-"): "+", ord("_"): "/"})
_DROP_WHITESPACE = str.maketrans("", "", _WHITESPACE)
_NON_WHITESPACE_RUN = re.compile(f"[^{_WHITESPACE}]+")
_CHUNK = 4096
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
_URL_SAFE = str.maketrans("+/", "-_")
# characters each common encoder leaves as they are, besides letters, digits and "_.-~"
_URL_KEPT = ("", "/", "!'()*", ";,/?:@&=+$#!'()*")


class FormKind(StrEnum):
    """How a value was transformed; named in the replacement for a named secret."""

    REFORMATTED = "reformatted"  # the value itself, split by whitespace or in another case
    REVERSED = "reversed"
    HEX = "hex"
    BASE64 = "base64"
    URL = "URL-encoded"


@dataclass(frozen=True, slots=True)
class Form:
    """One transformed form of a value as code would print it."""

    text: str
    kind: FormKind

    @property
    def needle(self) -> str:
        """``text`` normalised the way the output is before the search."""
        return self.text.translate(_NORMALISE)


def transformed_forms(value: str) -> list[Form]:
    """The forms of ``value`` looked for, the value itself included, each text once."""
    data = value.encode("utf-8")
    forms = [Form(value, FormKind.REFORMATTED), Form(value.upper(), FormKind.REFORMATTED),
             Form(value.lower(), FormKind.REFORMATTED), Form(value[::-1], FormKind.REVERSED),
             Form(data.hex(), FormKind.HEX), Form(data.hex().upper(), FormKind.HEX)]
    for core in _base64_cores(data):
        forms += [Form(core, FormKind.BASE64), Form(core.translate(_URL_SAFE), FormKind.BASE64)]
    forms.append(Form("".join(f"%{byte:02X}" for byte in data), FormKind.URL))
    for kept in _URL_KEPT:
        forms += [Form(quote(value, safe=kept), FormKind.URL),
                  Form(quote_plus(value, safe=kept), FormKind.URL)]
    unique: dict[str, Form] = {}
    for form in forms:
        unique.setdefault(form.text, form)
    return list(unique.values())


def _base64_cores(data: bytes) -> list[str]:
    """For each alignment ``a`` of the value in a base64 stream (0, 1 or 2 bytes after a
    3-byte boundary), the characters whose 6 bits all come from the value: from
    ``ceil(8a/6)`` to ``floor(8(a+n)/6)``."""
    cores = []
    for align in range(3):
        encoded = base64.b64encode(bytes(align) + data).decode("ascii")
        start, end = -(-8 * align // 6), 8 * (align + len(data)) // 6
        if end - start >= MIN_FORM_LENGTH:
            cores.append(encoded[start:end])
    return cores


@dataclass(frozen=True, slots=True)
class _Entry:
    """One value, the replacement to show, and its forms: by normalised needle (searched in
    the normalised output) and, for the short ones, as printed."""

    value: str
    name: str | None
    needles: tuple[tuple[str, Form], ...]
    as_printed: tuple[Form, ...]

    def replacement(self, kind: FormKind) -> str:
        return f"[REDACTED: {kind} secret {self.name}]" if self.name else REDACTED


def _entry(value: str, name: str | None) -> _Entry:
    needles: dict[str, Form] = {}
    as_printed: list[Form] = []
    for form in transformed_forms(value):
        needle = form.needle
        if len(needle) >= SPLIT_MIN_LENGTH:
            needles.setdefault(needle, form)
        elif form.text != value:  # the value as it is: exact masking's job
            as_printed.append(form)
    return _Entry(value, name, tuple(needles.items()), tuple(as_printed))


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    replacement: str


class TransformedSecrets:
    """The transformed forms of some values, ready to be blanked in tool output.

    ``values`` as a mapping (name -> plaintext, e.g. `ResolveReport.secrets`) names the
    secret and the transformation in the replacement (``[REDACTED: base64 secret NAME]``:
    never a ``{{secret:...}}`` reference, which would open to the plain value if the model
    copied it into a call); as a plain iterable every form becomes ``[REDACTED]``.
    """

    def __init__(self, values: Mapping[str, str] | Iterable[str], *,
                 min_length: int = MIN_VALUE_LENGTH) -> None:
        pairs = (((plain, name) for name, plain in values.items())
                 if isinstance(values, Mapping) else ((plain, None) for plain in values))
        entries: dict[str, _Entry] = {}
        for plain, name in pairs:
            if isinstance(plain, str) and len(plain) >= min_length and plain not in entries:
                entries[plain] = _entry(plain, name)
        # longest first: where two values' forms overlap, the longer one is named
        self._entries = tuple(sorted(entries.values(), key=lambda e: -len(e.value)))

    def __len__(self) -> int:
        return len(self._entries)

    def mask(self, text: str, *, skip: Collection[str] = ()) -> str:
        """``text`` with every form of every value (except those in ``skip``) replaced."""
        entries = [e for e in self._entries if e.value not in skip] if skip else self._entries
        if not text or not entries:
            return text
        normalised = text.translate(_NORMALISE)
        hits = [(entry, needle, form) for entry in entries for needle, form in entry.needles
                if needle in normalised]
        printed = [(entry, form) for entry in entries for form in entry.as_printed
                   if form.text in text]
        if not hits and not printed:
            return text
        spans = _printed_spans(text, printed) + _normalised_spans(text, normalised, hits)
        return splice(text, ((s.start, s.end, s.replacement) for s in _merged(spans)))


def _printed_spans(text: str, printed: list[tuple[_Entry, Form]]) -> list[_Span]:
    return [_grown(text, at, at + len(form.text), entry.replacement(form.kind), form.kind)
            for entry, form in printed for at in _occurrences(text, form.text)]


def _normalised_spans(text: str, normalised: str,
                      hits: list[tuple[_Entry, str, Form]]) -> list[_Span]:
    """Where each hit in the normalised output lies in ``text`` (a span found split then
    covers the whitespace inside it)."""
    positions = _Unsqueeze(text) if len(normalised) != len(text) else None
    spans = []
    for entry, needle, form in hits:
        for at in _occurrences(normalised, needle):
            start, end = at, at + len(needle)
            if positions is not None:
                start, end = positions.original(start), positions.original(end - 1) + 1
            spans.append(_grown(text, start, end, entry.replacement(form.kind), form.kind))
    return spans


def _grown(text: str, start: int, end: int, replacement: str, kind: FormKind) -> _Span:
    """A base64 span grows over the base64 characters on both sides (not over whitespace):
    the rest of its run still carries a few bits of the value at the edges."""
    if kind is FormKind.BASE64:
        while start > 0 and text[start - 1] in _BASE64_CHARS:
            start -= 1
        while end < len(text) and text[end] in _BASE64_CHARS:
            end += 1
    return _Span(start, end, replacement)


def _occurrences(haystack: str, needle: str) -> Iterator[int]:
    at = haystack.find(needle)
    while at >= 0:
        yield at
        at = haystack.find(needle, at + len(needle))


class _Unsqueeze:
    """Maps an index of the text without whitespace back to the text. Only a hit needs it,
    so it is built lazily: the squeezed length of each `_CHUNK` of the text up front (one
    `str.translate` each), then a walk inside one chunk per index asked for."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._starts: list[int] = []  # squeezed index at which each chunk starts
        squeezed = 0
        for at in range(0, len(text), _CHUNK):
            self._starts.append(squeezed)
            squeezed += len(text[at:at + _CHUNK].translate(_DROP_WHITESPACE))

    def original(self, index: int) -> int:
        """Where the character at squeezed ``index`` is in the text."""
        chunk = bisect_right(self._starts, index) - 1
        left = index - self._starts[chunk]
        at = chunk * _CHUNK
        for run in _NON_WHITESPACE_RUN.finditer(self._text, at, at + _CHUNK):
            if left < run.end() - run.start():
                return run.start() + left
            left -= run.end() - run.start()
        raise IndexError(index)


def _merged(spans: list[_Span]) -> list[_Span]:
    """Sorted, with overlapping spans joined (the first one's replacement kept)."""
    merged: list[_Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = _Span(last.start, max(last.end, span.end), last.replacement)
        else:
            merged.append(span)
    return merged
