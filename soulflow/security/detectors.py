"""Recognising sensitive values in free text: pure functions, no storage, no side effects.

Used twice: by `seal` (which stores what is found in the vault and replaces it with a
reference) and by `redact` (which only blanks it out). Every detector reports the span of the
*value* alone, so ``password=hunter22`` keeps ``password=`` visible and the model still knows
what kind of thing was there.

The detectors lean towards sealing: a false positive costs a reference where text was, a false
negative puts a secret at rest in plaintext. The deliberate exceptions are documented inline
(short values, Luhn-failing numbers, obvious placeholders), because over-sealing ordinary
numbers and words would make conversations unusable.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from soulflow.security.detection import Detection, Detector
from soulflow.security.platform_tokens import DiscordBotTokenDetector, TelegramBotTokenDetector
from soulflow.security.syntax import protected_spans

__all__ = ["ALL_DETECTORS", "REDACTION_DETECTORS", "Detection", "Detector",
           "find_sensitive_spans"]

MIN_ASSIGNED_VALUE_LENGTH = 4


_VALUE_GROUPS = ("value", "value_dq", "value_sq", "value_bt")


@dataclass(frozen=True, slots=True)
class RegexDetector:
    """A compiled pattern whose ``value*`` group (or whole match) is the sensitive part.

    ``anchors`` are lower-case literals at least one of which every match *starts* with
    (``sk-``, ``ghp_``, ``password``...). They are located with ``str.find`` on the lowered
    text and the pattern is only tried there: CPython's regex engine cannot skip ahead for
    patterns that open with a lookbehind or a case-insensitive alternation, and trying every
    position of a 10 KB log line costs ~20x more. Without anchors the pattern scans normally.
    ``type_of`` derives the type from the match (for patterns covering several key words);
    ``accept`` vetoes a candidate (too short, placeholder, fails a checksum...).
    """

    name: str
    type: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...] = ()
    accept: Callable[[re.Match[str], str], bool] | None = None
    type_of: Callable[[re.Match[str]], str] | None = None

    def _matches(self, text: str, lowered: str) -> Iterator[re.Match[str]]:
        if not self.anchors or len(lowered) != len(text):  # lower() can change lengths
            yield from self.pattern.finditer(text)
            return
        starts: set[int] = set()
        for anchor in self.anchors:
            pos = lowered.find(anchor)
            while pos >= 0:
                starts.add(pos)
                pos = lowered.find(anchor, pos + 1)
        covered = 0
        for pos in sorted(starts):
            if pos < covered:
                continue
            match = self.pattern.match(text, pos)
            if match is not None:
                covered = match.end()
                yield match

    def scan(self, text: str, lowered: str) -> Iterator[Detection]:
        for match in self._matches(text, lowered):
            start, end = match.span()
            for group in _VALUE_GROUPS:
                if group in self.pattern.groupindex and match.start(group) >= 0:
                    start, end = match.span(group)
                    break
            if self.accept is not None and not self.accept(match, text[start:end]):
                continue
            kind = self.type_of(match) if self.type_of is not None else self.type
            yield Detection(kind, start, end)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# The lookbehind sits after the first digit so the engine can skip ahead to digits.
_DIGIT_RUN_RE = re.compile(r"\d(?<![0-9A-Za-z_]\d)(?:[ \-]?\d){12,39}(?![0-9A-Za-z_])")
_GROUP_RE = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class LuhnCardDetector:
    """Bare 13-19 digit numbers (single spaces/dashes between groups) passing Luhn.

    Luhn rejects 90% of random numbers, which is what keeps order numbers, timestamps and
    phone numbers out; all-same-digit runs are skipped too. Within a longer run
    (``2024 4111 1111 1111 1111``) the longest group-aligned sub-run that passes wins, so
    surrounding digits cannot hide a card.
    """

    name: str = "card_number"
    type: str = "card"

    def scan(self, text: str, lowered: str) -> Iterator[Detection]:
        for run in _DIGIT_RUN_RE.finditer(text):
            found = self._best_card(run.group())
            if found is not None:
                yield Detection(self.type, run.start() + found[0], run.start() + found[1])

    @staticmethod
    def _best_card(run: str) -> tuple[int, int] | None:
        groups = [(m.start(), m.end()) for m in _GROUP_RE.finditer(run)]
        best: tuple[int, int, int] | None = None  # (digit count, start, end)
        for i in range(len(groups)):
            for j in range(len(groups), i, -1):
                digits = "".join(run[s:e] for s, e in groups[i:j])
                if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
                    continue
                if luhn_valid(digits) and (best is None or len(digits) > best[0]):
                    best = (len(digits), groups[i][0], groups[j - 1][1])
        return None if best is None else (best[1], best[2])


# ------------------------------------------------------------------------ token shapes

_L = r"(?<![A-Za-z0-9_\-])"  # left boundary for token shapes
_R = r"(?![A-Za-z0-9_\-])"


def _token(name: str, body: str, *anchors: str) -> RegexDetector:
    return RegexDetector(name, name, re.compile(_L + body + _R), anchors)


def _has_digit(_: re.Match[str], value: str) -> bool:
    return len(value) >= 8 and any(c.isdigit() for c in value)


def _is_basic_credential(_: re.Match[str], value: str) -> bool:
    """``Basic`` is an ordinary word; only accept it before base64 of ``user:password``."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


PEM_PRIVATE_KEY = RegexDetector(
    "pem_private_key",
    "private_key",
    # An unterminated block (truncated paste) is sealed to the end of the text.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    ),
    ("-----begin ",),
)
JWT = RegexDetector(
    "jwt",
    "jwt",
    re.compile(
        r"(?<![A-Za-z0-9_\-.])eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*"
        r"(?![A-Za-z0-9_\-])"
    ),
    ("eyj",),
)
ANTHROPIC_KEY = _token("anthropic_key", r"sk-ant-[A-Za-z0-9_\-]{20,}", "sk-ant-")
OPENAI_KEY = _token("openai_key", r"sk-(?!ant-)[A-Za-z0-9_\-]{20,}", "sk-")
GITHUB_TOKEN = _token(
    "github_token",
    r"(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})",
    *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
)
SLACK_TOKEN = _token(
    "slack_token", r"(?:xox[abprs]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})", "xox", "xapp-"
)
AWS_ACCESS_KEY = RegexDetector(
    "aws_access_key",
    "aws_access_key",
    re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    ("akia", "asia"),
)
BEARER = RegexDetector(
    "bearer_token",
    "bearer_token",
    re.compile(r"(?<![A-Za-z])(?i:bearer)[ \t]+(?P<value>[A-Za-z0-9\-._~+/]+=*)"),
    ("bearer",),
    accept=_has_digit,  # "bearer of bad news" is not a credential
)
BASIC = RegexDetector(
    "basic_auth",
    "basic_auth",
    re.compile(
        r"(?<![A-Za-z])(?i:basic)[ \t]+(?P<value>[A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])"
    ),
    ("basic",),
    accept=_is_basic_credential,
)



# ------------------------------------------------------------------ key = value assignments

_KEYWORDS: dict[str, str] = {
    "password": r"pass(?:word|wd|phrase)|(?<![A-Za-z0-9])pwd|비밀\s?번호|비번|패스워드|암호",
    "pin": r"(?<![A-Za-z0-9])pin(?:[ _\-]?(?:code|number|no))?|(?<![가-힣])핀(?:\s?번호)?",
    "api_key": r"api[ _\-]?key|(?<![가-힣])키",
    "access_key": r"access[ _\-]?key",
    "private_key": r"private[ _\-]?key",
    "secret": r"secret(?:[ _\-]?(?:access[ _\-]?)?key)?|시크릿",
    "token": r"token|토큰",
}
# Every alternative above starts with one of these (lower-case) literals; see `anchors`.
# fmt: off
_ANCHORS = (
    "pass", "pwd", "pin", "api", "access", "private", "secret", "token",
    "비밀", "비번", "패스워드", "암호", "핀", "키", "시크릿", "토큰",
)
# fmt: on
_KEY_ALTERNATION = "|".join(f"(?P<k_{t}>{body})" for t, body in _KEYWORDS.items())
_VALUE = (
    r"(?:\"(?P<value_dq>[^\"\n]*)\"|'(?P<value_sq>[^'\n]*)'|`(?P<value_bt>[^`\n]*)`"
    r"|(?P<value>[^\s\"'`]\S*))"
)
# Key, optional digits (password2), optional closing quote of a JSON/YAML key, separator.
_ASSIGNMENT_RE = re.compile(
    rf"(?:{_KEY_ALTERNATION})\d{{0,3}}[\"']?[ \t]*(?::=|[:=：])[ \t]*{_VALUE}", re.IGNORECASE
)
# fmt: off
_PLACEHOLDER_WORDS = frozenset({
    "null", "none", "nil", "true", "false", "undefined", "redacted", "[redacted]", "bearer",
    "basic", "string", "required", "optional", "hidden",
})
# fmt: on
_PLACEHOLDER_RE = re.compile(
    r"<[^<>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|([*xX#•.\-_])\1*|\{\{.*\}\}|%\(?\w*\)?s"
)
_CODE_CALL_RE = re.compile(r"[A-Za-z_][\w.]*\(.*\)[,;]?")


def _assigned_value_ok(match: re.Match[str], value: str) -> bool:
    """Reject values too short to be secrets, placeholders, and code (``get_password()``)."""
    if len(value) < MIN_ASSIGNED_VALUE_LENGTH or value.lower() in _PLACEHOLDER_WORDS:
        return False
    if _PLACEHOLDER_RE.fullmatch(value):
        return False
    # Unquoted "<your password>" and "get_password()" are placeholders and code, not secrets.
    unquoted = match.start("value") >= 0
    return not (unquoted and (value.startswith("<") or _CODE_CALL_RE.fullmatch(value)))


def _group_type(prefix: str, types: Sequence[str]) -> Callable[[re.Match[str]], str]:
    def type_of(match: re.Match[str]) -> str:
        return next(t for t in types if match.start(prefix + t) >= 0)

    return type_of


ASSIGNMENT = RegexDetector(
    "assignment",
    "secret",
    _ASSIGNMENT_RE,
    _ANCHORS,
    accept=_assigned_value_ok,
    type_of=_group_type("k_", tuple(_KEYWORDS)),
)

_CARD_KEY = (
    r"(?<![A-Za-z0-9])(?:credit[ _\-]?|debit[ _\-]?)?card(?:[ _\-]?(?:number|num|no\.?|#))?"
    r"|카드(?:\s?번호)?"
)
_ACCOUNT_KEY = (
    r"(?<![A-Za-z0-9])(?:bank[ _\-]?)?(?:account|acct)(?:[ _\-]?(?:number|num|no\.?|#))?"
    r"|계좌(?:\s?번호)?"
)
# Digits only (>= 8, so "card ending 1234" stays), optionally after a bank name
# ("계좌: 국민은행 123456-78-901234") which stays visible.
FINANCIAL_ASSIGNMENT = RegexDetector(
    "financial_assignment",
    "account",
    re.compile(
        rf"(?:(?P<f_card>{_CARD_KEY})|(?P<f_account>{_ACCOUNT_KEY}))(?![A-Za-z])(?:은|는|이|가)?"
        r"[\"']?[ \t]*[:=：#]?[ \t]*(?:(?<=[\s:=：#])[가-힣A-Za-z]{1,12}[ \t]+)?[\"']?"
        r"(?P<value>\d(?:[ \-]?\d){7,29})(?![0-9A-Za-z])",
        re.IGNORECASE,
    ),
    ("credit", "debit", "card", "카드", "bank", "account", "acct", "계좌"),
    type_of=_group_type("f_", ("card", "account")),
)
LUHN_CARD = LuhnCardDetector()
TELEGRAM_BOT_TOKEN = TelegramBotTokenDetector()
DISCORD_BOT_TOKEN = DiscordBotTokenDetector()

TOKEN_SHAPE_DETECTORS: tuple[Detector, ...] = (
    PEM_PRIVATE_KEY,
    JWT,
    ANTHROPIC_KEY,
    OPENAI_KEY,
    GITHUB_TOKEN,
    SLACK_TOKEN,
    TELEGRAM_BOT_TOKEN,
    DISCORD_BOT_TOKEN,
    AWS_ACCESS_KEY,
    BEARER,
    BASIC,
)
"""Self-identifying credentials: safe to look for anywhere, including logs."""

ALL_DETECTORS: tuple[Detector, ...] = (
    *TOKEN_SHAPE_DETECTORS,
    FINANCIAL_ASSIGNMENT,
    ASSIGNMENT,
    LUHN_CARD,
)
"""Everything, for sealing inbound chat text. Order breaks ties between identical spans."""

REDACTION_DETECTORS: tuple[Detector, ...] = (*TOKEN_SHAPE_DETECTORS, ASSIGNMENT)
"""For logs: bare Luhn numbers are left out because 13-digit millisecond timestamps and
ids would be blanked one time in ten; card numbers never reach logs unsealed anyway."""


def _overlaps(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start < e and s < end for s, e in spans)


def find_sensitive_spans(
    text: str, detectors: Sequence[Detector] = ALL_DETECTORS
) -> list[Detection]:
    """Non-overlapping detections in ``text``, in text order.

    Already-sealed material (``{{secret:...}}``, ``sv1.`` tokens) is never touched. Among
    overlapping candidates the longest wins, then the earliest, then the detector listed
    first - so a PEM block swallows the ``token:`` lines inside it, and ``sk-ant-...`` after
    ``password=`` is typed as an Anthropic key rather than a password.
    """
    if not text:
        return []
    lowered = text.lower()
    candidates: list[tuple[int, int, int, Detection]] = []
    for priority, detector in enumerate(detectors):
        for found in detector.scan(text, lowered):
            if found.end > found.start:
                candidates.append((found.start - found.end, found.start, priority, found))
    if not candidates:
        return []
    candidates.sort(key=lambda c: c[:3])
    taken: list[tuple[int, int]] = protected_spans(text)
    chosen: list[Detection] = []
    for _, _, _, found in candidates:
        if not _overlaps(found.start, found.end, taken):
            taken.append((found.start, found.end))
            chosen.append(found)
    chosen.sort(key=lambda d: d.start)
    return chosen
