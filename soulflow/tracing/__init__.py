"""Traces of a turn, for an operator's OpenTelemetry collector; free when tracing is off.

One trace per turn: the message's intake (`soulflow.intake`), its turn (`soulflow.turn`), the
agent run (`invoke_agent`), each model call (`chat <model>`, GenAI semantic conventions), each
tool call (`execute_tool <tool>`) and each delivery round of each reply (`soulflow.deliver`),
also when the dispatcher delivers it minutes later or another node takes the turn over: the
W3C `traceparent` rides in the durable records (the inbound journal, the outbox, the run's
first event), and whoever picks a record up continues its trace from there.

This module is the only face the rest of the daemon sees. It imports nothing of soulflow and
nothing of OpenTelemetry: the SDK is imported by `soulflow.tracing.otel`, which the runtime
loads only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Off, `span()` is one context-variable
read returning a shared no-op, and `traceparent()` is "".

Which tracer is active is a context variable the runtime sets once at start (tasks created
after it inherit it), so spans nest through asyncio without being passed by hand, several
runtimes in one process (tests) keep their own, and no module holds global state.

What may go into a span: names of steps, tools, models and channels, counts, statuses and
error kinds. Never a message's text, a sender's name, an error's message (it may quote a
reply or a URL with a token) or any id a user or a model wrote: `Span.set` is handed only
what the call sites below choose, and tests/unit/test_tracing.py sends a secret-looking
message through a whole turn and checks no attribute or name holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit

from soulflow.tracing.api import (
    OFF,
    Attributes,
    AttributeValue,
    Kind,
    Span,
    SpanScope,
    Tracer,
    active,
    span,
    traceparent,
    use,
    within,
)

__all__ = ["OFF", "Attributes", "AttributeValue", "Kind", "Session", "Span", "SpanScope",
           "Tracer", "active", "configured", "endpoint_host", "span", "start", "traceparent",
           "use", "within"]

log = logging.getLogger(__name__)


class Session(Protocol):
    """The SDK's provider of one runtime, flushed and shut down by `stop`."""

    tracer: Tracer

    async def stop(self) -> None: ...


def configured(environ: Mapping[str, str]) -> bool:
    """Tracing is on when an OTLP endpoint is set, unless the standard switches turn it off
    (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`)."""
    if not (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"


def endpoint_host(environ: Mapping[str, str]) -> str:
    """The collector's scheme, host and port, for the log (an endpoint URL may carry a
    password or a token in its user part or query)."""
    raw = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
           or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "")
    try:
        parts = urlsplit(raw)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable endpoint)"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def start(environ: Mapping[str, str], version: str) -> Session | None:
    """The tracing session the environment asks for, or None (off, or the `otel` extra is
    not installed: said once in the log, and the daemon runs untraced)."""
    if not configured(environ):
        return None
    try:
        from soulflow.tracing.otel import start_session
    except ImportError as exc:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed "
                    "(%s): tracing is off; install it with pip install 'soulflow[otel]'", exc.name)
        return None
    try:
        return start_session(environ, version)
    except ValueError as exc:
        log.warning("tracing is off: %s", exc)
        return None
