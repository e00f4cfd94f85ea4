"""Traces (soulflow/tracing) with the OpenTelemetry SDK's in-memory exporter: a whole turn of a
running daemon with a tool call is one trace with the span tree an operator expects, the GenAI
attributes of each model call; a reply delivered after retries, or by a dispatcher started
later on the same outbox, joins its turn's trace; nothing a user wrote (a pasted key, the
text) lands in a span; off, nothing is imported and nothing recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (pip install soulflow[otel])")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from soulflow import __version__, tracing  # noqa: E402
from soulflow.backends.file.dead_letters import DeadLetterQueue, FileDeadLetters  # noqa: E402
from soulflow.backends.file.outbox import FileOutbox, Outbox  # noqa: E402
from soulflow.bus.dispatcher import OutboundDispatcher  # noqa: E402
from soulflow.bus.retry import RetryPolicy  # noqa: E402
from soulflow.config import load_settings  # noqa: E402
from soulflow.contracts import InboundMessage, OutboundMessage, SendError  # noqa: E402
from soulflow.runtime import Runtime, create_runtime  # noqa: E402
from soulflow.tracing.otel import TracingSession, session_with  # noqa: E402
from tests.fakes.openai_api import FakeOpenAI  # noqa: E402
from tests.unit.test_bus import FakeClock, FakeSender, wait_until  # noqa: E402

SECRET = "sk-or-v1-" + "7f3a9c" * 8  # what an OpenRouter key looks like
MARKER = "zanzibar-quokka"  # a word of the message: no span may carry the text


@pytest.fixture
def exported() -> Iterator[tuple[TracingSession, InMemorySpanExporter]]:
    """A tracing session sending every span to memory, active in this test's context (and
    so in every task a runtime started from here creates)."""
    exporter = InMemorySpanExporter()
    session = session_with([SimpleSpanProcessor(exporter)], __version__, {})
    token = tracing.use(session.tracer)
    try:
        yield session, exporter
    finally:
        tracing.api._ACTIVE.reset(token)
        session.provider.shutdown()


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI(model="fake-model-1")
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def _runtime(tmp_path: Path, llm: FakeOpenAI, session: TracingSession) -> Runtime:
    settings = load_settings(tmp_path, {
        "DASHBOARD_ENABLED": "false", "LOG_LEVEL": "warning", "PROVIDER": "phi4_local",
        "PHI4_BASE_URL": llm.base_url, "PHI4_MODEL": "fake-model-1", "LOCAL_MODEL": "off",
        "PROVIDER_RETRY_BASE_MS": "10"})
    runtime = create_runtime(settings)
    runtime.traces = session  # instead of the environment's exporter
    await runtime.start()
    return runtime


def _by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _one(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> ReadableSpan:
    found = _by_name(spans, name)
    assert len(found) == 1, f"{name}: {[s.name for s in spans]}"
    return found[0]


def _parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def _turn(runtime: Runtime, exporter: InMemorySpanExporter, text: str) -> list[ReadableSpan]:
    """Send `text` on the local channel; the spans once its reply is delivered and its turn
    has ended (the dispatcher may deliver the stored reply before the turn's span closes)."""
    assert runtime.local is not None
    await runtime.local.submit("tracing", text)
    async with asyncio.timeout(30):
        while not {"soulflow.deliver", "soulflow.turn"} <= {
                s.name for s in exporter.get_finished_spans()}:
            await asyncio.sleep(0.01)
    return list(exporter.get_finished_spans())


async def test_a_turn_with_a_tool_call_is_one_trace_with_its_span_tree(
        tmp_path: Path, llm: FakeOpenAI,
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    session, exporter = exported
    (tmp_path / "notes.txt").write_text("hello", "utf-8")
    llm.script_tool_call("list_dir", {"path": "."})
    llm.script_reply("here are your files")
    runtime = await _runtime(tmp_path, llm, session)
    try:
        spans = await _turn(runtime, exporter, "what is in the workspace?")
    finally:
        await runtime.stop()

    intake, turn = _one(spans, "soulflow.intake"), _one(spans, "soulflow.turn")
    run, tool = _one(spans, "invoke_agent soulflow"), _one(spans, "execute_tool list_dir")
    models, deliver = _by_name(spans, "chat fake-model-1"), _one(spans, "soulflow.deliver")
    assert len(models) == 2  # the call that asked for the tool, the one that answered
    assert len({s.context.trace_id for s in spans}) == 1, "one trace per turn"
    assert intake.parent is None
    assert _parent_id(turn) == intake.context.span_id
    assert _parent_id(run) == turn.context.span_id
    assert {_parent_id(s) for s in [*models, tool]} == {run.context.span_id}
    assert _parent_id(deliver) == turn.context.span_id
    assert models[0].end_time <= tool.start_time <= tool.end_time <= models[1].start_time

    first = models[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == first["gen_ai.system"] == "phi4_local"
    assert first["gen_ai.request.model"] == "fake-model-1"
    assert first["gen_ai.response.model"] == "fake-model-1"
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] >= 0
    assert first["soulflow.tool_calls"] == 1
    assert tool.attributes["gen_ai.tool.name"] == "list_dir"
    assert tool.attributes["soulflow.tool.status"] == "ok"
    assert deliver.attributes["soulflow.delivery.outcome"] == "sent"
    assert intake.attributes["soulflow.intake.verdict"] == "fresh"
    resource = spans[0].resource.attributes
    assert resource["service.name"] == "soulflow" and resource["service.version"] == __version__


async def test_no_message_text_secret_or_token_reaches_a_span(
        tmp_path: Path, llm: FakeOpenAI,
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """A user pastes a key; the model echoes a word of the message and calls a tool with it,
    and one it made up. Names, attributes, events and links carry none of it."""
    session, exporter = exported
    llm.script_tool_calls([("read_file", {"path": f"{MARKER}.txt"}, None),
                           (f"{MARKER}_tool", {"x": SECRET}, None)])
    llm.script_reply(f"I saw {MARKER}")
    runtime = await _runtime(tmp_path, llm, session)
    try:
        spans = await _turn(runtime, exporter, f"my key is {SECRET}, remember {MARKER} please")
    finally:
        await runtime.stop()

    assert _one(spans, "execute_tool unknown").attributes["gen_ai.tool.name"] == "unknown"
    assert _one(spans, "execute_tool read_file").attributes["soulflow.tool.status"] == "error"
    exported_text = json.dumps([json.loads(s.to_json()) for s in spans])
    for needle in (SECRET, SECRET[9:], MARKER, "remember", "I saw"):
        assert needle not in exported_text, needle


async def test_a_reply_retried_later_is_delivered_in_its_turns_trace(
        tmp_path: Path, exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """Each delivery round is a span of the trace the reply was written in: the first round
    fails (rate limited), the retry after the backoff succeeds, both children of the turn."""
    _, exporter = exported
    sender, clock = FakeSender(script=[SendError("slow down", retry_after=3)]), FakeClock()
    dispatcher = _dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    try:
        with tracing.span("soulflow.turn") as _:
            turn_trace = tracing.traceparent()
            dispatcher.publish(OutboundMessage("fake", "c1", "hi", trace=turn_trace))
        await wait_until(lambda: sender.sent == ["hi"])
        await wait_until(lambda: len(_by_name(exporter.get_finished_spans(),
                                              "soulflow.deliver")) == 2)
    finally:
        await dispatcher.stop(1)
    turn = _one(exporter.get_finished_spans(), "soulflow.turn")
    first, second = _by_name(exporter.get_finished_spans(), "soulflow.deliver")
    assert {s.context.trace_id for s in (first, second)} == {turn.context.trace_id}
    assert _parent_id(first) == _parent_id(second) == turn.context.span_id
    assert first.attributes["soulflow.delivery.outcome"] == "retry"
    assert first.attributes["error.type"] == "rate_limited"
    assert first.status.status_code.name == "ERROR" and not first.status.description
    assert (second.attributes["soulflow.delivery.round"], second.attributes[
        "soulflow.delivery.outcome"]) == (2, "sent")


async def test_a_stored_reply_keeps_its_trace_across_a_restart(
        tmp_path: Path, exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """The traceparent is in the outbox record: a dispatcher that starts later (the next
    process) delivers the reply in the trace of the turn that wrote it."""
    _, exporter = exported
    with tracing.span("soulflow.turn"):
        trace = tracing.traceparent()
    sender, clock = FakeSender(gate=asyncio.Event()), FakeClock()
    first = _dispatcher(tmp_path, sender, clock)
    await first.start()
    stored = first.publish(OutboundMessage("fake", "c1", "later", trace=trace))
    await stored
    await first.stop(0.01)  # stopped before the gated send finished: still in the outbox
    assert "traceparent" in (tmp_path / "outbox.jsonl").read_text("utf-8")

    sender = FakeSender()
    second = _dispatcher(tmp_path, sender, clock)
    await second.start()
    try:
        await wait_until(lambda: sender.sent == ["later"])
        await wait_until(lambda: any(s.attributes.get("soulflow.delivery.outcome") == "sent"
                                     for s in exporter.get_finished_spans()))
    finally:
        await second.stop(1)
    turn = _one(exporter.get_finished_spans(), "soulflow.turn")
    sent = [s for s in exporter.get_finished_spans()
            if s.attributes.get("soulflow.delivery.outcome") == "sent"]
    assert [_parent_id(s) for s in sent] == [turn.context.span_id]
    assert sent[0].context.trace_id == turn.context.trace_id


def _dispatcher(tmp_path: Path, sender: FakeSender, clock: FakeClock) -> OutboundDispatcher:
    return OutboundDispatcher(
        FileOutbox(Outbox(tmp_path / "outbox.jsonl", clock=clock.time)),
        FileDeadLetters(DeadLetterQueue(tmp_path / "dlq.jsonl", clock=clock.time)),
        lambda provider: sender if provider == "fake" else None,
        policy=RetryPolicy(max_attempts=3, inline_retries=0, base_delay_s=1, jitter=0),
        clock=clock.time, sleep=clock.sleep, rand=lambda: 0.5)


def test_the_traceparent_rides_in_the_stored_records() -> None:
    """Inbound journal and outbox records keep the trace under `metadata.traceparent`, and a
    record without one (every record written before tracing) reads as untraced."""
    parent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    inbound = InboundMessage("local", "c", "m1", "u", "hi", trace=parent)
    stored = inbound.to_dict()
    assert stored["metadata"] == {"traceparent": parent}
    assert InboundMessage.from_dict(stored).trace == parent
    assert InboundMessage.from_dict(stored).platform_data == {}
    outbound = OutboundMessage("local", "c", "hi", trace=parent)
    assert OutboundMessage.from_dict(outbound.to_dict()).trace == parent
    assert "traceparent" not in OutboundMessage("local", "c", "hi").to_dict()["metadata"]
    assert InboundMessage.from_dict(InboundMessage("l", "c", "m", "u", "t").to_dict()).trace == ""


def test_a_malformed_stored_traceparent_starts_a_new_trace(
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """A record is data: a garbled traceparent loses the link, never the span."""
    _, exporter = exported
    for bad in ("garbage", "00-" + "0" * 32 + "-" + "b" * 16 + "-01", "00-zz-yy-01"):
        with tracing.span("soulflow.turn", parent=bad):
            pass
    assert [s.parent for s in exporter.get_finished_spans()] == [None, None, None]


def test_off_costs_an_import_of_nothing() -> None:
    """Without an endpoint the daemon's modules never import OpenTelemetry, and a span is
    the shared no-op."""
    code = ("import sys, soulflow.runtime, soulflow.cli.main, soulflow.doctor.runner\n"
            "import soulflow.tracing as t\n"
            "assert t.start({}, 'x') is None\n"
            "with t.span('a', {'k': 1}) as s: s.set('k', 2)\n"
            "assert t.traceparent() == '' and s is t.OFF\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_tracing_is_on_only_with_an_endpoint_and_the_standard_switches() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing.configured({})
    assert tracing.configured(endpoint)
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing.configured({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.configured({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert tracing.endpoint_host(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:pw@collector:4318/x?token=t"}) \
        == "https://collector:4318"


async def test_an_unsupported_protocol_leaves_tracing_off(caplog: pytest.LogCaptureFixture) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    assert tracing.start(env, __version__) is None
    assert "http/json" in caplog.text
    session = tracing.start({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, __version__)
    assert session is not None
    await session.stop()  # nothing buffered: returns at once, the collector never asked


def test_within_makes_a_stored_trace_current_without_a_span_of_its_own(
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """A reply published outside its turn (a decision from the dashboard, a resumed run)
    is stored with the trace of the run's turn."""
    _, exporter = exported
    with tracing.span("soulflow.turn"):
        turn = tracing.traceparent()
    assert tracing.traceparent() == ""
    with tracing.within(turn):
        assert tracing.traceparent() == turn
        with tracing.span("soulflow.deliver"):
            pass
    with tracing.within("not a traceparent"):
        assert tracing.traceparent() == ""
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["soulflow.turn", "soulflow.deliver"]
    assert _parent_id(spans[1]) == spans[0].context.span_id


def test_without_the_extra_the_daemon_says_so_once_and_runs_untraced() -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set where OpenTelemetry is not installed (its import made
    to fail, as on an install without the extra)."""
    code = ("import logging, sys\n"
            "sys.modules['opentelemetry'] = None  # not installed\n"
            "logging.basicConfig(level=logging.WARNING, stream=sys.stdout)\n"
            "import soulflow.tracing as t\n"
            "print(t.start({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4318'}, 'x'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.splitlines()[-1] == "None"
    assert "pip install 'soulflow[otel]'" in done.stdout


async def test_a_dead_letter_replayed_is_delivered_in_its_original_trace(
        tmp_path: Path, exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """Refused for good, the reply goes to the DLQ (its round a failed span); put back by
    the operator, it is delivered in the trace of the turn that wrote it, marked replayed."""
    _, exporter = exported
    sender, clock = FakeSender(script=[SendError("chat not found", permanent=True)]), FakeClock()
    dispatcher = _dispatcher(tmp_path, sender, clock)
    await dispatcher.start()
    try:
        with tracing.span("soulflow.turn"):
            await dispatcher.publish(OutboundMessage("fake", "c1", "hi",
                                                     trace=tracing.traceparent()))
        await wait_until(lambda: dispatcher.dead_count == 1)
        letters = await dispatcher.dlq.entries()
        assert letters[0].message.trace  # the DLQ keeps the trace with the reply
        await dispatcher.publish(letters[0].to_outbound())
        await wait_until(lambda: sender.sent == ["hi"])
        await wait_until(lambda: len(_by_name(exporter.get_finished_spans(),
                                              "soulflow.deliver")) == 2)
    finally:
        await dispatcher.stop(1)
    spans = exporter.get_finished_spans()
    turn = _one(spans, "soulflow.turn")
    dead, replayed = _by_name(spans, "soulflow.deliver")
    assert (dead.attributes["soulflow.delivery.outcome"], dead.attributes["error.type"]) == (
        "dead", "permanent")
    assert replayed.attributes["soulflow.delivery.replayed"] is True
    assert replayed.attributes["soulflow.delivery.outcome"] == "sent"
    assert {_parent_id(dead), _parent_id(replayed)} == {turn.context.span_id}


async def test_a_stopped_run_and_a_flood_leave_every_trace_whole(
        tmp_path: Path, llm: FakeOpenAI,
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    """/stop mid model call: the call's span says cancelled (not an error) and ends. Then 120
    messages into 6 chats at once: messages folded into one turn are linked from it, so
    every intake leads to exactly one turn, and every turn to its delivered reply."""
    session, exporter = exported
    runtime = await _runtime(tmp_path, llm, session)
    assert runtime.local is not None
    try:
        llm.script_delay(30)
        await runtime.local.submit("slow", "take your time")
        async with asyncio.timeout(10):
            await llm.wait_for_requests(1)
        await runtime.local.submit("slow", "/stop")
        async with asyncio.timeout(20):
            while len([s for s in exporter.get_finished_spans()
                       if s.name == "chat fake-model-1"]) < 1:
                await asyncio.sleep(0.01)
        stopped = _one(exporter.get_finished_spans(), "chat fake-model-1")
        assert stopped.attributes["soulflow.cancelled"] is True
        assert stopped.status.status_code.name == "UNSET"

        llm.reset()
        exporter.clear()
        await asyncio.gather(*(runtime.local.submit(f"flood{i % 6}", f"message {i}")
                               for i in range(120)))
        async with asyncio.timeout(60):
            while not _flood_answered(exporter.get_finished_spans(), 120):
                await asyncio.sleep(0.05)
    finally:
        await runtime.stop()
    spans = exporter.get_finished_spans()
    assert len(_by_name(spans, "soulflow.intake")) == 120
    reached: dict[int, int] = {}
    for turn in _by_name(spans, "soulflow.turn"):
        for context in [turn.parent, *(link.context for link in turn.links)]:
            assert context is not None
            reached[context.span_id] = reached.get(context.span_id, 0) + 1
    assert {i.context.span_id: 1 for i in _by_name(spans, "soulflow.intake")} == reached


def _flood_answered(spans: tuple[ReadableSpan, ...], messages: int) -> bool:
    """Every message's intake reached by a turn (as parent or link), every turn's reply
    delivered in its trace."""
    turns = _by_name(spans, "soulflow.turn")
    linked = sum(1 + len(turn.links) for turn in turns)
    delivered = {s.context.trace_id for s in _by_name(spans, "soulflow.deliver")
                 if s.attributes.get("soulflow.delivery.outcome") == "sent"}
    return linked >= messages and {t.context.trace_id for t in turns} <= delivered


async def test_a_failed_model_call_names_its_kind_not_its_message(
        tmp_path: Path, llm: FakeOpenAI,
        exported: tuple[TracingSession, InMemorySpanExporter]) -> None:
    session, exporter = exported
    llm.script_error(500, {"error": {"message": f"upstream said {MARKER}"}})
    llm.fail_next(10, status=500)
    runtime = await _runtime(tmp_path, llm, session)
    try:
        spans = await _turn(runtime, exporter, "hello?")
    finally:
        await runtime.stop()
    model = _one(spans, "chat fake-model-1")
    assert model.attributes["error.type"] == "server"
    assert model.status.status_code.name == "ERROR" and not model.status.description
    assert not model.events  # no exception event: its message could quote anything
    assert MARKER not in json.dumps([json.loads(s.to_json()) for s in spans])
