"""The textual forms secrets take once sealed: names, references and ciphertext tokens.

Three forms can appear in text that flows through the daemon:

* ``{{secret:NAME}}`` - a reference to the vault entry ``NAME``; this is what sealing writes.
* ``{{secret:NAME:sv1.<nonce>.<ciphertext>}}`` - an *inline* ciphertext: the value travels with
  the text and is decrypted with the vault key and ``NAME`` as associated data, so it does not
  need to be stored in the vault (and cannot be replayed under another name).
* a bare ``sv1.<nonce>.<ciphertext>`` token - accepted only when it is the ciphertext currently
  stored for some vault entry (bare tokens carry no name, and the name is the associated data).

All three are safe to persist, log and show to a model: none contains plaintext. Detectors leave
them alone, which is what makes sealing idempotent.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from soulflow.security.errors import InvalidCiphertext, InvalidSecretName

NAME_CHARS = r"A-Za-z0-9_.\-"
NAME_MAX_LENGTH = 200
TOKEN_PREFIX = "sv1"
NONCE_SIZE = 12
TAG_SIZE = 16
REDACTED = "[REDACTED]"
"""What redaction and masking put where a value was (when no reference can be shown)."""

_NAME_RE = re.compile(rf"[{NAME_CHARS}]{{1,{NAME_MAX_LENGTH}}}")
_NOT_NAME_CHAR_RE = re.compile(rf"[^{NAME_CHARS}]+")
_B64 = r"[A-Za-z0-9_\-]"
# 12-byte nonce -> 16 chars; ciphertext is at least the 16-byte tag -> 22 chars.
_TOKEN_SHAPE = rf"sv1\.{_B64}{{16}}\.{_B64}{{22,}}"
_TOKEN_FULL_RE = re.compile(_TOKEN_SHAPE)
TOKEN_RE = re.compile(rf"(?<![A-Za-z0-9_\-.]){_TOKEN_SHAPE}(?![A-Za-z0-9_\-])")
# The inline part is deliberately permissive so a damaged token is reported as invalid
# instead of silently not being recognised as a reference at all.
REFERENCE_RE = re.compile(
    rf"\{{\{{secret:(?P<name>[{NAME_CHARS}]{{1,{NAME_MAX_LENGTH}}})"
    r"(?::(?P<token>[^{}\s]*))?\}\}"
)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """One occurrence of a sealed secret in text; ``name`` and/or ``token`` is set.

    ``name`` only: a vault reference. Both: an inline ciphertext. ``token`` only: a bare token.
    """

    start: int
    end: int
    name: str | None
    token: str | None

    @property
    def label(self) -> str:
        """How to mention this reference to a user: the name, or a short token preview."""
        if self.name is not None:
            return self.name
        assert self.token is not None
        return token_preview(self.token)


def is_valid_name(name: object) -> bool:
    """True if ``name`` may be used as a vault entry name."""
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


def validate_secret_name(name: object) -> str:
    """Return ``name`` unchanged, or raise `InvalidSecretName` explaining the allowed charset."""
    if not is_valid_name(name):
        shown = repr(name)[:60]
        raise InvalidSecretName(
            f"secret name {shown} is invalid; use 1-{NAME_MAX_LENGTH} characters from "
            "letters, digits, '_', '.' and '-'."
        )
    assert isinstance(name, str)
    return name


def sanitize_name_part(part: str, *, max_length: int = 40, fallback: str = "x") -> str:
    """Squash arbitrary text (a provider id, a detector type) into the name charset.

    Used for parts of generated names, where an unexpected character must never make
    sealing fail - failing would leave the plaintext in the message.
    """
    cleaned = _NOT_NAME_CHAR_RE.sub("_", part).strip("._-")[:max_length]
    return cleaned or fallback


def secret_reference(name: str, token: str | None = None) -> str:
    """Format ``{{secret:NAME}}`` (or the inline ``{{secret:NAME:TOKEN}}`` form)."""
    validate_secret_name(name)
    return f"{{{{secret:{name}:{token}}}}}" if token else f"{{{{secret:{name}}}}}"


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64url_encode(data) != text:  # reject non-canonical encodings (stray trailing bits)
        raise ValueError("non-canonical base64")
    return data


def encode_token(nonce: bytes, ciphertext: bytes) -> str:
    """Format ``sv1.<b64url nonce>.<b64url ciphertext+tag>`` without padding."""
    return f"{TOKEN_PREFIX}.{_b64url_encode(nonce)}.{_b64url_encode(ciphertext)}"


def decode_token(token: str) -> tuple[bytes, bytes]:
    """Split a token into (nonce, ciphertext+tag); raise `InvalidCiphertext` if malformed."""
    if not isinstance(token, str) or _TOKEN_FULL_RE.fullmatch(token) is None:
        raise InvalidCiphertext("ciphertext token is malformed; expected sv1.<nonce>.<data>.")
    _, nonce_text, data_text = token.split(".")
    try:
        nonce, data = _b64url_decode(nonce_text), _b64url_decode(data_text)
    except (ValueError, binascii.Error):
        raise InvalidCiphertext("ciphertext token is not valid base64url.") from None
    if len(nonce) != NONCE_SIZE or len(data) < TAG_SIZE:
        raise InvalidCiphertext("ciphertext token has the wrong nonce or tag length.")
    return nonce, data


def is_valid_token(text: object) -> bool:
    """True if ``text`` has the exact shape of a ciphertext token (says nothing about the key)."""
    try:
        decode_token(text)  # type: ignore[arg-type]
    except InvalidCiphertext:
        return False
    return True


def token_preview(token: str) -> str:
    """A short, non-sensitive label for a token in user messages."""
    return token if len(token) <= 16 else token[:12] + "…"


def splice(text: str, replacements: Iterable[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end, new)`` span replaced by ``new``; the spans are sorted
    and do not overlap (redaction and reference resolution both rewrite text this way)."""
    parts: list[str] = []
    cursor = 0
    for start, end, new in replacements:
        parts.append(text[cursor:start])
        parts.append(new)
        cursor = end
    parts.append(text[cursor:])
    return "".join(parts)


def iter_secret_refs(text: str) -> Iterator[SecretRef]:
    """Yield every reference, inline ciphertext and bare token in ``text``, in order."""
    refs = [
        SecretRef(m.start(), m.end(), m.group("name"), m.group("token"))
        for m in REFERENCE_RE.finditer(text)
    ]
    if TOKEN_PREFIX + "." in text:
        covered = [(r.start, r.end) for r in refs]
        for m in TOKEN_RE.finditer(text):
            if not any(s <= m.start() < e for s, e in covered):
                refs.append(SecretRef(m.start(), m.end(), None, m.group(0)))
        refs.sort(key=lambda r: r.start)
    yield from refs


def protected_spans(text: str) -> list[tuple[int, int]]:
    """Spans that already hold sealed material; detectors must not touch them."""
    if "{{secret:" not in text and TOKEN_PREFIX + "." not in text:
        return []
    return [(r.start, r.end) for r in iter_secret_refs(text)]
