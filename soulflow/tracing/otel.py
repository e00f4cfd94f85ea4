"""The OpenTelemetry SDK behind `soulflow.tracing`: imported only when tracing is wanted.

The SDK reads the standard `OTEL_*` variables of the process environment itself (endpoint,
headers, timeout, compression, certificates, sampler, batch sizes, resource attributes); this
module only picks the exporter (`http/protobuf` unless `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`
says `grpc`), names the service `soulflow` unless the environment names it, and keeps its
`TracerProvider` to itself: it is never installed as OpenTelemetry's process-wide provider, so
a library that traces on its own does not land in the operator's traces by accident, and two
runtimes in one process (tests) do not share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from soulflow.tracing.api import OFF, Attributes, AttributeValue, Kind, Span

log = logging.getLogger(__name__)

_KINDS = {Kind.INTERNAL: SpanKind.INTERNAL, Kind.CLIENT: SpanKind.CLIENT,
          Kind.CONSUMER: SpanKind.CONSUMER, Kind.PRODUCER: SpanKind.PRODUCER}
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
#: the longest a flush at stop may hold the daemon's shutdown (a collector that is down)
STOP_FLUSH_S = 3.0


def parse_traceparent(value: str) -> SpanContext | None:
    """A stored W3C traceparent as a remote span context (None: absent or malformed: a record
    is data, and a bad one only loses the link, never the turn)."""
    match = _TRACEPARENT.fullmatch(value) if value else None
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True,
                       trace_flags=TraceFlags(int(match[3], 16)))


def format_traceparent(span_context: SpanContext) -> str:
    return (f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
            f"{int(span_context.trace_flags):02x}")


class _SdkSpan:
    """`soulflow.tracing.Span` over an SDK span."""

    __slots__ = ("_span", "settled")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.settled = False  # the call site said how it ended: an exception leaves it so

    def set(self, name: str, value: AttributeValue) -> None:
        self._span.set_attribute(name, value)

    def fail(self, error_type: str) -> None:
        self.settled = True
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR))  # no description: it could quote

    def cancel(self) -> None:
        self.settled = True
        self._span.set_attribute("soulflow.cancelled", True)


class OtelTracer:
    """`soulflow.tracing.Tracer` over one SDK `TracerProvider`."""

    def __init__(self, provider: TracerProvider, version: str) -> None:
        self._tracer = provider.get_tracer("soulflow", version)
        self.closed = False

    @contextmanager
    def span(self, name: str, attributes: Attributes | None, parent: str,
             links: Iterable[str], kind: Kind) -> Iterator[Span]:
        if self.closed:  # the runtime stopped: spans of late stragglers go nowhere
            yield OFF
            return
        parent_context = parse_traceparent(parent) if parent else None
        context = (trace.set_span_in_context(NonRecordingSpan(parent_context),
                                             otel_context.Context())
                   if parent_context is not None else None)
        linked = [Link(found) for found in map(parse_traceparent, links) if found is not None]
        with self._tracer.start_as_current_span(
                name, context=context, kind=_KINDS[kind], attributes=attributes,
                links=linked or None, record_exception=False,
                set_status_on_exception=False) as sdk_span:
            span = _SdkSpan(sdk_span)
            try:
                yield span
            except asyncio.CancelledError:
                span.cancel()
                raise
            except BaseException as exc:  # its class only: a message may quote anything
                if not span.settled:
                    span.fail(type(exc).__name__)
                raise

    @contextmanager
    def within(self, parent: str) -> Iterator[Span]:
        found = None if self.closed else parse_traceparent(parent)
        if found is None:
            yield OFF
            return
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(found)))
        try:
            yield OFF
        finally:
            otel_context.detach(token)

    def traceparent(self) -> str:
        if self.closed:
            return ""
        span_context = trace.get_current_span().get_span_context()
        return format_traceparent(span_context) if span_context.is_valid else ""


@dataclass
class TracingSession:
    """The SDK's provider for one runtime: built at start, flushed and shut down at stop."""

    provider: TracerProvider
    tracer: OtelTracer

    async def stop(self) -> None:
        """Send what is buffered, then shut the provider down, waiting at most STOP_FLUSH_S:
        the exporter blocks, and retries a collector that is down for longer than a
        shutdown should take. So it runs in a thread of its own (a daemon thread: what it
        has not sent when the process exits is dropped)."""
        self.tracer.closed = True
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def shut_down() -> None:
            try:
                self.provider.shutdown()
            except Exception:  # tracing never stops a shutdown
                log.warning("shutting the trace exporter down failed", exc_info=True)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                    loop.call_soon_threadsafe(settle)

        threading.Thread(target=shut_down, name="otel-shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(done, STOP_FLUSH_S)
        except TimeoutError:
            log.warning("traces not all sent within %gs at stop (is the collector "
                        "reachable?); the rest are dropped", STOP_FLUSH_S)


def session_with(processors: Iterable[SpanProcessor], version: str,
                 environ: Mapping[str, str]) -> TracingSession:
    """A session sending spans to `processors` (the exporter's batch processor; in tests, the
    SDK's in-memory exporter)."""
    attributes = {"service.version": version}
    if not environ.get("OTEL_SERVICE_NAME") and \
            "service.name=" not in environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "soulflow"
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    processors = list(processors)
    for processor in processors:
        provider.add_span_processor(processor)
    return TracingSession(provider, OtelTracer(provider, version))


def exporter_from_environ(environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP exporter the environment asks for; `http/protobuf` by default. The exporter
    reads its endpoint, headers, timeout and TLS files from the environment itself."""
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise ValueError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package "
                             "opentelemetry-exporter-otlp-proto-grpc") from None
        return GrpcExporter()
    if protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol[:30]!r} is not supported "
                         "(use http/protobuf or grpc)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def start_session(environ: Mapping[str, str], version: str) -> TracingSession:
    """The session the environment configures (ValueError: a protocol it cannot serve)."""
    return session_with([BatchSpanProcessor(exporter_from_environ(environ))], version, environ)
