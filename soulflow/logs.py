"""Log output: human-readable lines by default, JSON lines on request, secrets redacted.

One handler on the root logger, owned by this module (`configure_logging` replaces it, so a
command can switch format or level after reading its settings). Every record is stamped with
what the code handling it knows - the chat, the agent run, the model provider - from context
variables the conversation and the agent loop set (`log_context`), so one conversation can
be followed through the daemon's log with `jq 'select(.chat == "slack:C123")'`.

Redaction is a filter on the handler (`RedactingFilter`), which runs before any formatter:
the message and traceback are already clean when either format renders them, and the filter
the daemon adds at start (`install_log_redaction`) lands on the same handler.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import TextIO

from soulflow.security.redact import RedactingFilter, Redactor

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT_FIELDS = ("chat", "run_id", "provider")

_chat: contextvars.ContextVar[str | None] = contextvars.ContextVar("log_chat", default=None)
_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("log_run_id", default=None)
_provider: contextvars.ContextVar[str | None] = contextvars.ContextVar("log_provider",
                                                                       default=None)
_VARS = {"chat": _chat, "run_id": _run_id, "provider": _provider}


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@contextlib.contextmanager
def log_context(*, chat: str | None = None, run_id: str | None = None,
                provider: str | None = None) -> Iterator[None]:
    """Stamp records logged inside the block (in this task and the tasks it starts) with
    the given fields; None leaves a field as the enclosing block set it."""
    tokens: list[tuple[contextvars.ContextVar[str | None], contextvars.Token[str | None]]] = []
    for name, value in (("chat", chat), ("run_id", run_id), ("provider", provider)):
        if value is not None:
            tokens.append((_VARS[name], _VARS[name].set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_context() -> dict[str, str]:
    """The fields set by the enclosing `log_context` blocks."""
    return {name: value for name, var in _VARS.items() if (value := var.get()) is not None}


class ContextFilter(logging.Filter):
    """Copies the context fields onto the record (when the record has none of its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current_context().items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        return True


class TextFormatter(logging.Formatter):
    """The classic line, plus `[chat=… run_id=… provider=…]` when known."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{n}={v}" for n in CONTEXT_FIELDS if (v := getattr(record, n, None))]
        if not fields:
            return line
        head, sep, rest = line.partition("\n")  # keep a traceback below the first line
        return f"{head} [{' '.join(fields)}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: at, level, logger, msg, the context fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        at = dt.datetime.fromtimestamp(record.created, dt.UTC)
        entry: dict[str, object] = {
            "at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(), "logger": record.name,
            "msg": record.getMessage()}
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


class SoulflowHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler `configure_logging` owns, so reconfiguring replaces only it."""


def resolve_format(explicit: str | None = None, setting: str | None = None) -> LogFormat:
    """--log-format, else the LOG_FORMAT setting, else $LOG_FORMAT, else text."""
    raw = explicit or setting or os.environ.get("LOG_FORMAT") or LogFormat.TEXT.value
    try:
        return LogFormat(raw.strip().lower())
    except ValueError:
        return LogFormat.TEXT


def configure_logging(level: str = "info", fmt: str | LogFormat | None = LogFormat.TEXT, *,
                      stream: TextIO | None = None,
                      redactor: Redactor | None = None) -> logging.Handler:
    """Log to `stream` (stderr) in `fmt` at `level`, through the context and redaction
    filters; replaces the handler a previous call installed (`fmt` None: keep its format, so
    a command's `--log-format` survives a later call that only changes the level; without
    one, `resolve_format()`). Returns the handler."""
    root = logging.getLogger()
    previous = [h for h in root.handlers if isinstance(h, SoulflowHandler)]
    if fmt is None:
        kept = previous[-1].formatter if previous else None
        fmt = LogFormat.JSON if isinstance(kept, JsonFormatter) else \
            LogFormat.TEXT if kept is not None else resolve_format()
    for old in previous:
        root.removeHandler(old)
        old.close()
    handler = SoulflowHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if LogFormat(fmt) is LogFormat.JSON else
                         TextFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactingFilter(redactor or Redactor.from_environ()))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for chatty in ("httpx", "httpcore"):  # one INFO line per model request is noise
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))
    return handler
