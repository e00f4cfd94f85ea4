"""The face of tracing the daemon's code uses: spans, the current traceparent, the active
tracer; no OpenTelemetry import (see soulflow/tracing/__init__.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from enum import StrEnum
from typing import Protocol

AttributeValue = str | bool | int | float | list[str]
Attributes = Mapping[str, AttributeValue]


class Kind(StrEnum):
    """The OpenTelemetry span kinds the daemon uses."""

    INTERNAL = "internal"
    CLIENT = "client"  # a model call
    CONSUMER = "consumer"  # a message taken in from a channel
    PRODUCER = "producer"  # a reply handed to a channel


class Span(Protocol):
    """What a call site may do with its span: add attributes, mark it failed."""

    def set(self, name: str, value: AttributeValue) -> None: ...

    def fail(self, error_type: str) -> None:
        """Status ERROR with `error.type` (a kind or class name, never a message)."""

    def cancel(self) -> None:
        """`soulflow.cancelled`: stopped by a person, no failure (nor is the exception that
        leaves the block then)."""


class Tracer(Protocol):
    def span(self, name: str, attributes: Attributes | None, parent: str,
             links: Iterable[str], kind: Kind) -> SpanScope: ...

    def traceparent(self) -> str: ...

    def within(self, parent: str) -> SpanScope: ...


class SpanScope(Protocol):
    def __enter__(self) -> Span: ...

    def __exit__(self, *exc: object) -> bool | None: ...


class _Off:
    """The span, and its scope, when tracing is off: one shared object that does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, name: str, value: AttributeValue) -> None:
        return None

    def fail(self, error_type: str) -> None:
        return None

    def cancel(self) -> None:
        return None


OFF = _Off()

_ACTIVE: ContextVar[Tracer | None] = ContextVar("soulflow_tracer", default=None)


def span(name: str, attributes: Attributes | None = None, *, parent: str = "",
         links: Iterable[str] = (), kind: Kind = Kind.INTERNAL) -> SpanScope:
    """A span around a block: `with tracing.span("soulflow.turn") as s: ...`.

    `parent`: a W3C traceparent to continue (a stored record's); "" for the current span (or
    a new trace when there is none). `links`: traceparents of related traces (the other
    messages of a folded turn). An exception leaving the block marks the span failed with its
    class name only."""
    tracer = _ACTIVE.get()
    if tracer is None:
        return OFF
    return tracer.span(name, attributes, parent, links, kind)


def traceparent() -> str:
    """The current span as a W3C `traceparent` header value, "" when off or outside a span:
    what a durable record stores so the trace goes on where it is picked up."""
    tracer = _ACTIVE.get()
    return "" if tracer is None else tracer.traceparent()


def within(parent: str) -> SpanScope:
    """Make a stored traceparent the current trace for the block, without a span of its
    own: what the block stores (a reply to the outbox) joins that trace. For work done on a
    run outside its turn (a decision from the dashboard or a reaction, a resumed run)."""
    tracer = _ACTIVE.get()
    if tracer is None or not parent:
        return OFF
    return tracer.within(parent)


def active() -> bool:
    """Whether a tracer is active here (to skip work that only feeds spans)."""
    return _ACTIVE.get() is not None


def use(tracer: Tracer | None) -> Token[Tracer | None]:
    """Make `tracer` the active one in this context and the tasks created from it."""
    return _ACTIVE.set(tracer)
