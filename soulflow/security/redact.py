"""Last-line redaction for logs, session files, events and the dashboard.

Sealing is the primary protection for chat input; this catches what sealing never sees: the
daemon's own credentials (from the environment *and* the workspace's `.env`: every setting the
catalog marks secret, plus any `.env` entry whose name looks secret), values registered at
runtime (secrets opened for a tool), and credential-shaped strings from anywhere (provider
error bodies, tracebacks).

One daemon, one `Redactor` (`Redactor.for_settings`), shared by every sink: log handlers
(`install_log_redaction`), session files, thread journals, the event hub (hence the
dashboard) and model requests (`soulflow.security.redacting_provider`).
Unlike sealing nothing is stored: matches simply become ``[REDACTED]``.

It runs on every log record, so it is built for speed: known values are matched in one pass of
one precompiled alternation (longest first), and each detector is skipped unless one of its
literal trigger substrings occurs in the text. Structured values (journal events, model
requests) repeat the same history turn after turn: `redact_strings` remembers the strings it
found clean until the known values change, so each is scanned once.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from soulflow.security.detectors import REDACTION_DETECTORS, Detector, find_sensitive_spans
from soulflow.security.syntax import REDACTED, splice
from soulflow.security.transformed import TransformedSecrets

ENV_MIN_LENGTH = 6
KNOWN_MIN_LENGTH = 4
# `redact_strings` remembers strings it found clean, up to this many characters in all (then
# starts over): journals and model requests repeat the same history turn after turn. 1 M
# characters hold the recent histories of some 400 busy chats (20 turns of ~126 characters
# each). The memo is most of a daemon's warm-up: 8 M took the soak's daemon about 50 minutes
# to fill, RSS rising all the while, and 2 M about 13 minutes at 20 messages a second (3.8 MiB
# of the 8 MiB Python allocated between 8,000 and 24,000 messages of bench traffic).
CLEAN_MEMO_CHARS = 1_000_000
# Deliberately not "PWD": $PWD/$OLDPWD are working directories, and blanking them would
# erase every file path from the logs.
_SECRET_ENV_NAME_RE = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL", re.IGNORECASE)
# A dict key naming a secret: its value is redacted whatever it looks like. The keyword must end
# the key so that "max_tokens" or "token_count" keep their (harmless) numbers.
_SECRET_FIELD_RE = re.compile(
    r"(?:pass(?:word|wd|phrase)|token|secret|api[_\-]?key|access[_\-]?key|private[_\-]?key"
    r"|secret[_\-]?key|authorization|cookie|credentials?|(?:^|[_\-.\s])(?:pass|pwd|pin))$",
    re.IGNORECASE,
)


def secret_env_values(
    environ: Mapping[str, str] | None = None, *, min_length: int = ENV_MIN_LENGTH
) -> list[str]:
    """Values of environment variables whose names look secret (``*TOKEN*``, ``*KEY*``...)."""
    env = os.environ if environ is None else environ
    return [
        value
        for name, value in env.items()
        if _SECRET_ENV_NAME_RE.search(name) and len(value) >= min_length
    ]


def secret_setting_values(settings: Any, *, min_length: int = ENV_MIN_LENGTH) -> list[str]:
    """Credentials the daemon was configured with, wherever they came from.

    ``settings`` is a `soulflow.config.Settings`: the values of every setting the catalog
    marks ``secret`` (the process environment and `.env` merged), plus every `.env` entry
    whose name looks secret (``GITHUB_TOKEN`` kept there for a skill is a credential too).
    """
    from soulflow.config.catalog import SETTINGS

    values = [str(settings.values.get(s.name) or "") for s in SETTINGS if s.secret]
    values += secret_env_values(_dotenv(Path(settings.workspace)), min_length=min_length)
    return [v for v in values if len(v) >= min_length]


def _dotenv(workspace: Path) -> dict[str, str]:
    """The values of ``.env``, read the one safe way (no link followed, the operator's own
    file); an unsafe ``.env`` stops the daemon at boot anyway, so here it is just empty."""
    from soulflow.config import ConfigError, read_env_file

    try:
        return read_env_file(workspace)
    except ConfigError:
        return {}


class _CleanMemo:
    """Strings one set of known values and detectors left unchanged (redaction is a pure
    function of the text, the known values and the detectors). Bounded by total characters:
    past `CLEAN_MEMO_CHARS` it starts over. Replaced whole when the known values change, never
    cleared in place, so a concurrent reader sees either the old memo or the new one."""

    __slots__ = ("_chars", "_strings")

    def __init__(self) -> None:
        self._strings: dict[str, None] = {}
        self._chars = 0

    def has(self, text: str) -> bool:
        return text in self._strings

    def add(self, text: str) -> None:
        if self._chars + len(text) > CLEAN_MEMO_CHARS:
            if len(text) > CLEAN_MEMO_CHARS // 8:
                return  # one huge string is not worth the whole memo
            self._strings = {}
            self._chars = 0
        self._strings[text] = None
        self._chars += len(text)


_TRAILING_WORD = re.compile(r"\S+\Z")


def _begun_value(text: str, values: Iterable[str]) -> int:
    """The length of the longest end of `text` that is the beginning of one of `values`."""
    longest = 0
    for value in values:
        first = value[0]
        start = max(len(text) - len(value) + 1, 0)
        while (start := text.find(first, start)) >= 0:
            if len(text) - start > longest and value.startswith(text[start:]):
                longest = len(text) - start
                break
            start += 1
    return longest


class Redactor:
    """Replaces known secret values and credential-shaped strings with ``[REDACTED]``.

    Thread-safe: `register` builds a new compiled pattern and swaps it in with one
    assignment, so concurrent `redact` calls see either the old or the new set.
    """

    def __init__(
        self,
        known_values: Iterable[str] = (),
        *,
        detectors: Sequence[Detector] = REDACTION_DETECTORS,
        min_length: int = KNOWN_MIN_LENGTH,
    ) -> None:
        self._detectors = tuple(detectors)
        self._min_length = min_length
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        self._clean = _CleanMemo()
        self._transformed: tuple[frozenset[str], TransformedSecrets] | None = None
        self.register(*known_values)

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        known_values: Iterable[str] = (),
        detectors: Sequence[Detector] = REDACTION_DETECTORS,
    ) -> Redactor:
        """A redactor for this process: secret-looking env values plus ``known_values``."""
        redactor = cls(known_values, detectors=detectors)
        redactor.register(*secret_env_values(environ))
        return redactor

    @classmethod
    def for_settings(cls, settings: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """The daemon's redactor: the environment's secrets and the configured credentials."""
        redactor = cls.from_environ(environ)
        redactor.register(*secret_setting_values(settings))
        return redactor

    def __repr__(self) -> str:
        return f"Redactor(<{len(self._values)} known values>, {len(self._detectors)} detectors)"

    @property
    def known_count(self) -> int:
        return len(self._values)

    def register(self, *values: str) -> None:
        """Add plaintexts to redact from now on (shorter than ``min_length`` are ignored)."""
        new = {v for v in values if isinstance(v, str) and len(v) >= self._min_length}
        with self._lock:
            if new <= self._values:
                return
            merged = self._values | new
            ordered = sorted(merged, key=lambda v: (-len(v), v))  # longest match wins
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
            self._values = merged
            # last: a caller that sees the new memo already sees the new pattern
            self._clean = _CleanMemo()

    def redact(self, text: str) -> str:
        """``text`` with every known value and detected credential replaced by ``[REDACTED]``."""
        if not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        spans = find_sensitive_spans(text, self._detectors)
        if not spans:
            return text
        return splice(text, ((span.start, span.end, REDACTED) for span in spans))

    def redact_growing(self, text: str) -> str:
        """What of a text still being written (a streamed answer) can be shown now: redacted,
        without the tail that may be the start of a secret not written out yet. That is the
        longest end of the text that begins a known value (a partial one matches nothing
        yet), and then the word being written, where a credential-shaped token may still be
        growing into one a detector knows. So what is shown holds no secret the finished
        text's redaction hides (that one may still hide a word shown before a secret, such
        as a "Bearer" in front of its token)."""
        clean = self.redact(text)
        kept = clean[:len(clean) - _begun_value(clean, self._values)]
        word = _TRAILING_WORD.search(kept)
        return kept[:word.start()] if word is not None else kept

    def redact_transformed(self, text: str, *, skip: Collection[str] = ()) -> str:
        """``text`` with the transformed forms of every known value (reversed, hex, base64,
        URL-encoded, split by whitespace...: `soulflow.security.transformed`) redacted, except
        the values in ``skip``.

        For tool output only, where code can transform a value: the other sinks see text the
        daemon wrote, so they keep the one-pass `redact`. The forms are computed on first use
        after the known values change.
        """
        values = self._values
        cached = self._transformed
        if cached is None or cached[0] is not values:
            cached = (values, TransformedSecrets(values, min_length=self._min_length))
            self._transformed = cached
        return cached[1].mask(text, skip=skip)

    def redact_strings(self, obj: Any) -> Any:
        """Redact every string in a JSON-like value, keys included, and nothing else.

        Unlike `redact_obj` a value is never blanked for its key's name: journals and model
        requests hold ``{"password": "{{secret:X}}"}`` tool arguments whose references must
        survive (a reference is never itself redacted).

        Strings found clean are remembered (`_CleanMemo`) until the known values change, so
        the history a journal or model request repeats every turn is scanned once, not once
        per turn. Only clean strings are kept: the memo never holds anything it redacted.
        """
        if isinstance(obj, str):
            clean = self._clean  # before redact() reads the pattern (see register)
            if clean.has(obj):
                return obj
            out = self.redact(obj)
            if out == obj:
                clean.add(obj)
            return out
        if isinstance(obj, dict):
            return {self.redact_strings(k): self.redact_strings(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.redact_strings(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_strings(item) for item in obj)
        return obj

    def redact_obj(self, obj: Any) -> Any:
        """Redact every string in a JSON-like value; returns a new object, never mutates.

        Values under keys that name a secret (``password``, ``api_key``, ``Authorization``...)
        are replaced wholesale, because ``{"password": "hunter22"}`` has nothing else that
        marks ``hunter22`` as sensitive.
        """
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                if (
                    isinstance(key, str)
                    and _SECRET_FIELD_RE.search(key)
                    and isinstance(value, str | int | float)
                    and not isinstance(value, bool)
                    and value != ""
                ):
                    out[key] = REDACTED
                else:
                    out[key] = self.redact_obj(value)
            return out
        if isinstance(obj, list):
            return [self.redact_obj(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_obj(item) for item in obj)
        return obj


class RedactingFilter(logging.Filter):
    """Redacts each record's message, arguments and traceback text; never drops a record.

    The message is formatted here (``msg % args``) and stored back with ``args`` cleared,
    because a secret can hide in either. Attach it to *handlers*: filters on a logger do not
    see records propagated from its children.
    """

    def __init__(self, redactor: Redactor, name: str = "") -> None:
        super().__init__(name)
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not kill logging, or leak via repr
            message = str(record.msg)
        record.msg = self.redactor.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True


def install_log_redaction(redactor: Redactor,
                          logger: logging.Logger | None = None) -> Callable[[], None]:
    """Put ``redactor`` on every handler of ``logger`` (default: root); return the undo.

    The CLI installs an environment-only filter before settings are read; the daemon adds its
    own (which also knows `.env` credentials and opened secrets) and removes it on stop.
    """
    target = logger if logger is not None else logging.getLogger()
    installed = RedactingFilter(redactor)
    handlers = list(target.handlers)
    for handler in handlers:
        handler.addFilter(installed)

    def uninstall() -> None:
        for handler in handlers:
            handler.removeFilter(installed)

    return uninstall
