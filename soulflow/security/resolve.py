"""Turning references back into plaintext - only inside a tool's execution - and back again.

`resolve_secret_references` is all-or-nothing: if any reference cannot be opened the caller
gets the original value back untouched, so a tool never runs with half its secrets decrypted
(and a partially resolved structure can never be logged by accident on the error path).

`mask_known_secrets` is the return trip: tool output may echo a secret (``env``, a failing
``curl -v``...), so before the output goes to the model, the session or a log, every known
plaintext in it is swapped back to its reference or to ``[REDACTED]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soulflow.security.redact import Redactor
from soulflow.security.references import RefKey, open_references
from soulflow.security.syntax import REDACTED, iter_secret_refs, secret_reference, splice
from soulflow.security.transformed import TransformedSecrets
from soulflow.security.vault import SecretVault

MIN_MASK_LENGTH = 4


@dataclass(frozen=True, slots=True)
class ResolveReport:
    """Outcome of resolution. ``value`` and ``secrets`` hold plaintext: hidden from ``repr``.

    ``secrets`` maps each opened name to its plaintext so the caller can run
    ``mask_known_secrets(tool_output, report.secrets)`` on whatever the tool prints.
    """

    value: Any = field(repr=False)
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    ok: bool = True
    secrets: dict[str, str] = field(default_factory=dict, repr=False)


def resolve_secret_references(value: Any, vault: SecretVault, *,
                              chat: str | None = None) -> ResolveReport:
    """Replace every reference in every string of ``value`` (recursively) with its plaintext.

    ``chat`` is the run's chat scope: secrets sealed in other chats are *missing* there (see
    `soulflow.security.references`); ``None`` opens everything (the operator's view).

    Dicts (keys and values), lists and tuples are rebuilt, never mutated; other values pass
    through. If any reference is missing or invalid, returns ``ok=False`` with ``value`` being
    the very object passed in. Vault-wide failures (unsafe key, corrupt file) are raised.
    """
    found = open_references(value, vault, chat)
    opened, missing, invalid = found.opened, found.missing, found.invalid
    if missing or invalid:
        return ResolveReport(value, missing, invalid, ok=False)
    if not opened:
        return ResolveReport(value)
    secrets = {name: plain for name, plain in opened.values()}
    return ResolveReport(_substitute(value, opened), secrets=secrets)


def _substitute(value: Any, opened: Mapping[RefKey, tuple[str, str]]) -> Any:
    if isinstance(value, str):
        refs = list(iter_secret_refs(value))
        if not refs:
            return value
        return splice(value, ((ref.start, ref.end, opened[(ref.name, ref.token)][1])
                              for ref in refs))
    if isinstance(value, dict):
        return {_substitute(k, opened): _substitute(v, opened) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(item, opened) for item in value]
    if isinstance(value, tuple):
        return tuple(_substitute(item, opened) for item in value)
    return value


def mask_known_secrets(
    text: str, values: Iterable[str] | Mapping[str, str], *, min_length: int = MIN_MASK_LENGTH
) -> str:
    """Replace every occurrence of a known plaintext in ``text``.

    ``values`` as a mapping (name -> plaintext, e.g. `ResolveReport.secrets`) puts
    ``{{secret:NAME}}`` back; as a plain iterable it puts ``[REDACTED]``. Values shorter than
    ``min_length`` are skipped: masking every "1234" or "yes" would garble ordinary output.
    Longer values win where two overlap.
    """
    if isinstance(values, Mapping):
        pairs = [(plain, secret_reference(name)) for name, plain in values.items()]
    else:
        pairs = [(plain, REDACTED) for plain in values]
    replacement: dict[str, str] = {}
    for plain, substitute in sorted(pairs, key=lambda p: -len(p[0])):
        if isinstance(plain, str) and len(plain) >= min_length:
            replacement.setdefault(plain, substitute)
    if not text or not replacement:
        return text
    present = [plain for plain in replacement if plain in text]
    if not present:
        return text
    pattern = re.compile("|".join(re.escape(plain) for plain in present))
    return pattern.sub(lambda m: replacement[m.group(0)], text)


def mask_tool_output(text: str, secrets: Mapping[str, str],
                     redactor: Redactor | None = None) -> str:
    """A tool's output made safe for the model, the session and the chat.

    Every value opened for the call (``secrets``, name -> plaintext) goes back to its reference
    where it appears as it is, and is blanked, named, where code transformed it (reversed,
    hex, base64, URL-encoded, split by whitespace: `soulflow.security.transformed`); so are
    the transformed forms of the ``redactor``'s known values (daemon credentials, secrets
    opened by earlier calls, e.g. one a call wrote into a file that this one reads). The
    plain forms of those are left to the redactor every sink runs.
    """
    if secrets:
        text = mask_known_secrets(text, secrets)
        text = TransformedSecrets(secrets).mask(text)
    if redactor is not None:
        text = redactor.redact_transformed(text, skip=set(secrets.values()))
    return text
