"""`soulflow run` with OTEL_EXPORTER_OTLP_ENDPOINT set exports each turn as one trace over
OTLP/HTTP (protobuf) to a real receiver on loopback; a turn cut by `kill -9` is finished by
the next process in the same trace; a collector that is down costs the chat nothing."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.proto", reason="needs the otel extra")

from tests.e2e.harness import wait_for  # noqa: E402
from tests.fakes.openai_api import FakeOpenAIThread  # noqa: E402
from tests.fakes.otlp_collector import CollectorThread, ReceivedSpan  # noqa: E402

SECRET = "sk-or-v1-" + "4be1d0" * 8
MARKER = "marmalade-okapi"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}  # ms between the batch processor's exports


@pytest.fixture
def collector() -> Iterator[CollectorThread]:
    with CollectorThread() as running:
        yield running


def _named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def _delivered(collector: CollectorThread, count: int = 1) -> list[ReceivedSpan]:
    def enough() -> list[ReceivedSpan] | None:
        spans = collector.received()
        ended = {s.span_id for s in spans}  # a delivery may end before its turn's span does
        sent = [s for s in _named(spans, "soulflow.deliver")
                if s.attributes.get("soulflow.delivery.outcome") == "sent"
                and s.parent_span_id in ended]
        return spans if len(sent) >= count else None
    return wait_for(enough, 20, what="the delivery span at the collector")


def test_a_turn_reaches_the_collector_as_one_trace_without_its_text(
        make_daemon, fake_llm: FakeOpenAIThread, collector: CollectorThread) -> None:
    daemon = make_daemon(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, **FAST_EXPORT).start()
    fake_llm.script_tool_call("list_dir", {"path": "."})
    fake_llm.script_reply(f"done: {MARKER}")
    message_id = daemon.say(f"{MARKER}: my key is {SECRET}")
    assert daemon.wait_reply(message_id)["content"] == f"done: {MARKER}"
    spans = _delivered(collector)

    by_id = {s.span_id: s for s in spans}
    deliver = _named(spans, "soulflow.deliver")[0]
    turn = by_id[deliver.parent_span_id]
    assert turn.name == "soulflow.turn"
    intake = by_id[turn.parent_span_id]
    assert intake.name == "soulflow.intake" and intake.parent_span_id == ""
    run = next(s for s in spans if s.parent_span_id == turn.span_id and
               s.name == "invoke_agent soulflow")
    children = sorted(s.name for s in spans if s.parent_span_id == run.span_id)
    assert children == ["chat fake-model", "chat fake-model", "execute_tool list_dir"]
    trace = {s.trace_id for s in (intake, turn, run, deliver)}
    assert len(trace) == 1
    model = _named(spans, "chat fake-model")[0]
    assert model.attributes["gen_ai.request.model"] == "fake-model"
    assert model.attributes["gen_ai.usage.input_tokens"] > 0
    assert model.kind == 3  # SPAN_KIND_CLIENT
    assert intake.resource["service.name"] == "soulflow"
    for span in spans:
        for needle in (SECRET, MARKER, "my key"):
            assert needle not in span.text, (needle, span)

    assert daemon.stop(signal.SIGTERM) == 0  # the exporter shut down with the daemon


def test_the_standard_variables_name_the_service(
        make_daemon, fake_llm: FakeOpenAIThread, collector: CollectorThread) -> None:
    daemon = make_daemon(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector.url + "/v1/traces",
                         OTEL_SERVICE_NAME="soulflow-eu", OTEL_EXPORTER_OTLP_HEADERS="x-team=ops",
                         OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
                         **FAST_EXPORT).start()
    daemon.wait_reply(daemon.say("hello"))
    spans = _delivered(collector)
    assert spans[0].resource["service.name"] == "soulflow-eu"
    assert spans[0].resource["deployment.environment"] == "test"
    assert collector.collector.headers[0].get("x-team") == "ops"
    assert collector.collector.headers[0]["Content-Type"] == "application/x-protobuf"


def test_spans_buffered_at_stop_are_flushed(
        make_daemon, fake_llm: FakeOpenAIThread, collector: CollectorThread) -> None:
    """A long batch delay: the turn's spans reach the collector only because the daemon
    flushes them on its way down."""
    daemon = make_daemon(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
                         OTEL_BSP_SCHEDULE_DELAY="600000").start()
    daemon.wait_reply(daemon.say("hello"))
    assert collector.received() == []
    assert daemon.stop(signal.SIGTERM) == 0
    assert _named(collector.received(), "soulflow.turn")


def test_a_turn_cut_by_kill_9_goes_on_in_the_same_trace(
        make_daemon, fake_llm: FakeOpenAIThread, collector: CollectorThread) -> None:
    """The traceparent is journaled with the message: the next process answers it in the
    trace its intake began (a Redis node taking a dead node's chat reads the same record)."""
    daemon = make_daemon(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, **FAST_EXPORT).start()
    fake_llm.script_delay(30)  # the first answer never comes: the daemon dies waiting
    message_id = daemon.say("a question")
    intake = wait_for(lambda: _named(collector.received(), "soulflow.intake"), 20,
                      what="the intake span")[0]
    wait_for(lambda: fake_llm.requests, 20, what="the model call")
    daemon.kill()

    fake_llm.reset()
    daemon.start()
    daemon.wait_reply(message_id, timeout=30)
    spans = _delivered(collector)
    turns = _named(spans, "soulflow.turn")
    assert [t.parent_span_id for t in turns] == [intake.span_id]  # the killed one never ended
    assert {s.trace_id for s in _named(spans, "soulflow.deliver")} == {intake.trace_id}


def test_a_collector_that_is_down_costs_the_chat_nothing(make_daemon,
                                                         fake_llm: FakeOpenAIThread) -> None:
    with CollectorThread() as gone:
        url = gone.url  # a loopback port nobody listens on any more
    daemon = make_daemon(OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_EXPORTER_OTLP_TIMEOUT="1",
                         **FAST_EXPORT)
    env_file = daemon.workspace / ".env"  # where OpenTelemetry never looks
    env_file.write_text("OTEL_SERVICE_NAME=from-env-file\n")
    env_file.chmod(0o600)
    daemon.start()
    assert daemon.wait_reply(daemon.say("still there?"))["content"] == "echo: still there?"
    assert daemon.stop(signal.SIGTERM) == 0
    assert "tracing to http://127.0.0.1:" in daemon.log()
    assert "OTEL_SERVICE_NAME in .env is not read" in daemon.log()
