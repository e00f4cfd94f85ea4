"""A loopback OpenTelemetry collector: OTLP/HTTP trace export (`POST /v1/traces`), as the
OpenTelemetry Collector's `otlp` receiver takes it.

It decodes each request with the protocol's own message (`ExportTraceServiceRequest`, from
opentelemetry-proto), gzip or not, and answers an `ExportTraceServiceResponse`; a body that is
not one is refused with 400, as a collector does. What it received is kept as plain
`ReceivedSpan` records (ids in hex, attributes as Python values, the resource's attributes),
for tests to read the trees a daemon exported.

`python -m tests.fakes.otlp_collector --port 0 [--verbose]` serves it on its own and prints
what it received (`--verbose`: each span).
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace id, span id)
    status_code: int = 0
    status_message: str = ""

    @property
    def text(self) -> str:
        """Everything the span carries, as text: for "no secret anywhere" checks."""
        return repr((self.name, self.attributes, self.resource, self.status_message))


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one export request (raises `google.protobuf` DecodeError on garbage)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    span.name, span.trace_id.hex(), span.span_id.hex(),
                    span.parent_span_id.hex(), span.kind, _attributes(span.attributes),
                    resource, [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                    span.status.code, span.status.message))
    return spans


class FakeCollector:
    """The receiver on the caller's event loop; `spans` grows with each export."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.refused = 0
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()  # read from a test thread (CollectorThread)
        self._runner: web.AppRunner | None = None
        self.url = ""  # the endpoint for OTEL_EXPORTER_OTLP_ENDPOINT

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, port))
        await web.SockSite(runner, sock).start()
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        try:
            if request.content_type != PROTOBUF:
                raise ValueError(f"unsupported content type {request.content_type}")
            spans = decode(body)
        except Exception as exc:  # a collector refuses what it cannot read
            with self._lock:
                self.refused += 1
            return web.Response(status=400, text=f"{type(exc).__name__}")
        with self._lock:
            self.requests += 1
            self.headers.append(dict(request.headers))
            self.spans.extend(spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type=PROTOBUF)


class CollectorThread:
    """A `FakeCollector` on its own loop in a daemon thread, for synchronous tests."""

    def __init__(self) -> None:
        self.collector = FakeCollector()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="fake-otlp-collector")

    @property
    def url(self) -> str:
        return self.collector.url

    def received(self) -> list[ReceivedSpan]:
        return self.collector.received()

    def __enter__(self) -> CollectorThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.collector.start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.collector.stop(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


async def _main(port: int, verbose: bool) -> None:  # pragma: no cover - manual use
    collector = FakeCollector()
    await collector.start(port=port)
    print(f"READY {collector.url}", flush=True)
    seen = 0
    while True:
        await asyncio.sleep(1.0)
        spans = collector.received()
        if verbose:
            for span in spans[seen:]:
                print(span.trace_id, span.span_id, span.parent_span_id or "-", span.name,
                      span.attributes, flush=True)
        elif len(spans) > seen:
            print(f"{len(spans)} spans in {collector.requests} requests", flush=True)
        seen = len(spans)


if __name__ == "__main__":  # pragma: no cover - manual use
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--verbose", action="store_true", help="print every span")
    args = parser.parse_args()
    try:
        asyncio.run(_main(args.port, args.verbose))
    except KeyboardInterrupt:
        pass
