"""Sealing inbound chat text: move every sensitive value into the vault, keep a reference.

This is the first thing the inbound pipeline does with a message, before the text reaches a
session file, a log line, an event, the dashboard or a model. After it, the only trace of a
pasted password is ``{{secret:inbound.<provider>.c<chat>.<type>.v<fingerprint>}}``; the value
itself comes back only inside a tool's execution (see `resolve`).

Sealed values are scoped to their chat (`chat_scope`): they open only in that chat's runs.

Names are deterministic per (chat, value, key): pasting the same password twice yields the same
reference and one vault entry. The value part is a keyed fingerprint (HMAC under a key derived
from the vault key), not a bare SHA-256 prefix, because these names are visible everywhere and
an unkeyed hash of a 4-digit PIN is reversed by trying all 10,000 candidates.

Failure policy: if the vault cannot store a value this raises (a `VaultError`); the caller must
then hold or drop the message, never persist the original text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from soulflow.security.detectors import ALL_DETECTORS, Detection, Detector, find_sensitive_spans
from soulflow.security.syntax import sanitize_name_part, secret_reference
from soulflow.security.vault import SecretVault, chat_scope

INBOUND_PREFIX = "inbound"


@dataclass(frozen=True, slots=True)
class SealedValue:
    """One value that was sealed; ``start``/``end`` locate its reference in `SealResult.text`.

    Offsets point into the *sealed* text (``text[start:end] == "{{secret:" + name + "}}"``)
    because the original text is meant to be discarded.
    """

    name: str
    type: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class SealResult:
    """Sealed text plus what was sealed (empty when the text held nothing sensitive)."""

    text: str
    sealed: list[SealedValue] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.sealed)


def _short_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def inbound_name_prefix(provider: str, chat_id: str) -> str:
    """``inbound.<provider>.c<sha256(chat_id)[:12]>.``: what every name sealed in a chat starts
    with (how resolution tells one chat's sealed values from another's)."""
    return ".".join((INBOUND_PREFIX, sanitize_name_part(provider),
                     "c" + _short_sha256(str(chat_id)))) + "."


def inbound_secret_name(provider: str, chat_id: str, type_: str, fingerprint: str) -> str:
    """``inbound.<provider>.c<sha256(chat_id)[:12]>.<type>.v<fingerprint>``.

    The chat id is hashed only to keep names short and charset-safe; it is not a secret.
    """
    return ".".join(
        (
            INBOUND_PREFIX,
            sanitize_name_part(provider),
            "c" + _short_sha256(str(chat_id)),
            sanitize_name_part(type_),
            "v" + sanitize_name_part(fingerprint),
        )
    )


def seal_inbound_sensitive_text(
    text: str,
    *,
    provider: str,
    chat_id: str,
    vault: SecretVault,
    detectors: Sequence[Detector] = ALL_DETECTORS,
) -> SealResult:
    """Store every sensitive value of ``text`` in ``vault`` and return the text with references.

    Idempotent: references and ``sv1.`` tokens are never re-detected, so sealing sealed text
    returns it unchanged.
    """
    [result] = seal_many(
        [text], provider=provider, chat_id=chat_id, vault=vault, detectors=detectors
    )
    return result


def seal_many(
    texts: Iterable[str],
    *,
    provider: str,
    chat_id: str,
    vault: SecretVault,
    detectors: Sequence[Detector] = ALL_DETECTORS,
) -> list[SealResult]:
    """Seal several texts of one chat (thread context, attachment names/paths) at once.

    All new values are written with a single vault update before any sealed text is returned.
    """
    items = list(texts)
    found: list[list[tuple[Detection, str]]] = []
    to_store: dict[str, str] = {}
    for text in items:
        named: list[tuple[Detection, str]] = []
        for det in find_sensitive_spans(text, detectors):
            value = text[det.start : det.end]
            name = inbound_secret_name(provider, chat_id, det.type, vault.fingerprint(value))
            to_store[name] = value
            named.append((det, name))
        found.append(named)
    if not to_store:
        return [SealResult(text) for text in items]

    existing = set(vault.names())
    vault.set_many({n: v for n, v in to_store.items() if n not in existing},
                   scope=chat_scope(provider, chat_id))
    return [_apply(text, named) for text, named in zip(items, found, strict=True)]


def _apply(text: str, named: list[tuple[Detection, str]]) -> SealResult:
    """Splice references into ``text``; detections are sorted and non-overlapping."""
    if not named:
        return SealResult(text)
    parts: list[str] = []
    sealed: list[SealedValue] = []
    cursor = 0
    out_len = 0
    for det, name in named:
        parts.append(text[cursor : det.start])
        out_len += det.start - cursor
        ref = secret_reference(name)
        sealed.append(SealedValue(name, det.type, out_len, out_len + len(ref)))
        parts.append(ref)
        out_len += len(ref)
        cursor = det.end
    parts.append(text[cursor:])
    return SealResult("".join(parts), sealed)
