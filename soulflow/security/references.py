"""Checking, before a tool runs, that every secret its input mentions can actually be opened.

Orchestration calls `inspect_secret_references_for_orchestration` on a planned tool call (or
any text/JSON-like value) so it can stop and ask the user for what is missing instead of
running a tool with ``{{secret:...}}`` left in its arguments. The report and the message only
ever contain names (or short ciphertext previews), never values.

Reference forms are described in `soulflow.security.syntax`. How each one is opened:

* ``{{secret:NAME}}`` - the vault entry ``NAME``; absent -> *missing*.
* ``{{secret:NAME:TOKEN}}`` - ``TOKEN`` decrypted with the vault key and ``NAME`` as associated
  data; it need not be stored. Malformed/tampered/other key -> *invalid*.
* bare ``sv1.`` token - must equal the ciphertext currently stored for some entry (the name is
  the associated data and a bare token does not carry one); otherwise -> *invalid*.

Scope: every function takes ``chat`` (a `soulflow.security.vault.chat_scope` string) for a run
of that chat. An entry sealed in another chat, and an inline token named after another chat's
inbound value, are then reported *missing*, exactly like a name that was never stored: the
report must not tell chat B that chat A has a secret of that name. ``chat=None`` is the
operator's view (no restriction).

A stored entry that no longer decrypts (damaged, or written under another key) is *invalid*.
Vault-wide failures (unsafe key file, corrupt ``secrets.json``) are raised, not reported: they
are an operator problem, not a per-reference one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from soulflow.security.errors import InvalidCiphertext, SecretNotFound
from soulflow.security.seal import INBOUND_PREFIX, inbound_name_prefix
from soulflow.security.syntax import SecretRef, is_valid_name, iter_secret_refs
from soulflow.security.vault import SecretVault


@dataclass(frozen=True, slots=True)
class ReferenceReport:
    """Which referenced secrets cannot be opened.

    ``missing`` holds names absent from the vault; ``invalid_ciphertexts`` holds names (or, for
    bare tokens, a preview like ``sv1.AbCdEfGh…``) whose ciphertext failed to parse or decrypt.
    """

    missing: list[str] = field(default_factory=list)
    invalid_ciphertexts: list[str] = field(default_factory=list)
    ok: bool = True
    referenced: list[str] = field(default_factory=list)


def open_reference(ref: SecretRef, vault: SecretVault,
                   chat: str | None = None) -> tuple[str, str]:
    """Return ``(name, plaintext)`` for one reference, as a run of ``chat`` may see it.

    Raises `SecretNotFound` or `InvalidCiphertext`; callers decide whether that is fatal.
    """
    if ref.name is not None and not _name_open_in(ref.name, chat):
        raise SecretNotFound(ref.name)
    if ref.name is not None and ref.token is not None:
        return ref.name, vault.decrypt(ref.name, ref.token, chat=chat)
    if ref.name is not None:
        return ref.name, vault.get(ref.name, chat=chat)
    assert ref.token is not None
    name = vault.name_for_token(ref.token, chat=chat)
    if name is None:
        raise InvalidCiphertext(
            "bare ciphertext token is not stored in the vault; write it as "
            "{{secret:NAME:TOKEN}} so it can be opened."
        )
    return name, vault.decrypt(name, ref.token)


def _name_open_in(name: str, chat: str | None) -> bool:
    """Inbound names carry their chat (``inbound.<provider>.c<hash>.…``): only that chat's
    runs may open them, even from an inline token whose vault entry is gone."""
    if chat is None or not name.startswith(INBOUND_PREFIX + "."):
        return True
    provider, _, chat_id = chat.partition(":")
    return name.startswith(inbound_name_prefix(provider, chat_id))


def iter_strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value (dict keys and values, lists, tuples)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_strings(key)
            yield from iter_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from iter_strings(item)


def reference_labels(value: Any) -> list[str]:
    """The label of every reference in ``value`` (a string or JSON-like value), each once, in
    order; nothing is opened, so this is safe to show before a call runs (approval reasons)."""
    labels: list[str] = []
    for string in iter_strings(value):
        for ref in iter_secret_refs(string):
            _add_once(labels, ref.label)
    return labels


RefKey = tuple[str | None, str | None]


@dataclass(slots=True)
class OpenedReferences:
    """Every distinct reference in a value, opened once: the plaintexts by reference, and the
    labels that are missing (here) or invalid, in the order they first appear."""

    opened: dict[RefKey, tuple[str, str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    referenced: list[str] = field(default_factory=list)


def open_references(value: Any, vault: SecretVault, chat: str | None) -> OpenedReferences:
    """Open every reference in every string of ``value`` (a string or JSON-like value)."""
    found = OpenedReferences()
    seen: set[RefKey] = set()
    for string in iter_strings(value):
        for ref in iter_secret_refs(string):
            key = (ref.name, ref.token)
            if key in seen:
                continue
            seen.add(key)
            _add_once(found.referenced, ref.label)
            try:
                found.opened[key] = open_reference(ref, vault, chat)
            except SecretNotFound:
                _add_once(found.missing, ref.label)
            except InvalidCiphertext:
                _add_once(found.invalid, ref.label)
    return found


def _add_once(labels: list[str], label: str) -> None:
    if label not in labels:
        labels.append(label)


def inspect_secret_references_for_orchestration(text: Any, vault: SecretVault, *,
                                                chat: str | None = None) -> ReferenceReport:
    """Report every reference in ``text`` (a string or JSON-like value) that cannot be opened.

    Each reference is fully opened (decrypted and discarded), so ``ok`` means resolution
    will succeed, not merely that the names exist.
    """
    found = open_references(text, vault, chat)
    return ReferenceReport(found.missing, found.invalid, not found.missing and not found.invalid,
                           found.referenced)


def _how_to_set(name: str) -> str:
    return f"`/secret set {name}` in a direct message or `soulflow secret set {name}`"


def secret_resolution_required_message(report: ReferenceReport) -> str:
    """The user-facing explanation of why a tool cannot run yet ("" when nothing is wrong).

    Mentions names and how to set them, never values.
    """
    if report.ok:
        return ""
    sentences: list[str] = []
    if len(report.missing) == 1:
        name = report.missing[0]
        sentences.append(f"secret {name} is not stored. Set it with {_how_to_set(name)}.")
    elif report.missing:
        names = ", ".join(report.missing)
        sentences.append(f"secrets {names} are not stored. Set each with {_how_to_set('NAME')}.")
    named = [label for label in report.invalid_ciphertexts if is_valid_name(label)]
    bare = [label for label in report.invalid_ciphertexts if not is_valid_name(label)]
    for name in named:
        sentences.append(
            f"the encrypted value of secret {name} could not be decrypted (it is damaged or was "
            f"sealed with another key). Set it again with {_how_to_set(name)}."
        )
    if bare:
        sentences.append(
            f"an encrypted value ({', '.join(bare)}) could not be opened with this vault. "
            f"Send the value again, or store it with {_how_to_set('NAME')}."
        )
    return "I can't run this yet: " + " Also, ".join(sentences)
