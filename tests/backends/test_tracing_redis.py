"""Traces across Redis nodes: a turn daemon A took in and died in the middle of is answered by
daemon B in the same trace (the traceparent rides in the journaled inbound record), and a run
B resumes after A died mid-tool continues the trace its first event recorded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.proto", reason="needs the otel extra")

from tests.backends.node_daemons import node_daemons  # noqa: E402
from tests.backends.redis_server import RedisServer  # noqa: E402
from tests.backends.test_resume_daemons import (  # noqa: E402
    GROUPS,
    USER,
    chat_held_by,
    post,
    ran,
    reading,
    sent,
)
from tests.e2e.harness import Daemon, wait_for  # noqa: E402
from tests.fakes.openai_api import FakeOpenAIThread  # noqa: E402
from tests.fakes.otlp_collector import CollectorThread, ReceivedSpan  # noqa: E402
from tests.fakes.rate_limits import TELEGRAM_LIMITS  # noqa: E402
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread  # noqa: E402


@pytest.fixture
def telegram() -> Iterator[FakeTelegramThread]:
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg:
        for chat in GROUPS:
            tg.add_chat(chat, "supergroup", title=f"group {chat}")
        yield tg


@pytest.fixture
def collector() -> Iterator[CollectorThread]:
    with CollectorThread() as running:
        yield running


@pytest.fixture
def two_nodes(tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer,
              telegram: FakeTelegramThread,
              collector: CollectorThread) -> Iterator[tuple[Daemon, Daemon]]:
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "1", "TELEGRAM_API_URL": telegram.url,
                "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN, "TELEGRAM_ALLOWED_USERS": str(USER),
                "CHANNEL_POLL_TIMEOUT_S": "1",
                "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with node_daemons(tmp_path, fake_llm.base_url, **settings) as nodes:
        yield nodes["node-a"], nodes["node-b"]


def named(collector: CollectorThread, name: str) -> list[ReceivedSpan]:
    return [s for s in collector.received() if s.name == name]


def delivered_in(collector: CollectorThread, trace_id: str) -> list[ReceivedSpan]:
    return [s for s in named(collector, "soulflow.deliver") if s.trace_id == trace_id
            and s.attributes.get("soulflow.delivery.outcome") == "sent"]


def test_a_turn_taken_over_by_another_node_continues_its_trace(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread, collector: CollectorThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    reading(telegram)
    fake_llm.script_delay(60)  # A's model call never returns: A dies waiting for it
    post(telegram, "a slow question")
    intake = wait_for(lambda: named(collector, "soulflow.intake"), what="A's intake span")[0]
    wait_for(lambda: fake_llm.requests, what="A's model call")
    node_a.kill()
    node_b.start()
    wait_for(lambda: "echo: a slow question" in sent(telegram), timeout=30,
             what="B to answer the message")
    wait_for(lambda: delivered_in(collector, intake.trace_id), what="B's delivery span")
    turns = [t for t in named(collector, "soulflow.turn") if t.trace_id == intake.trace_id]
    assert [t.parent_span_id for t in turns] == [intake.span_id]  # B's: A's never ended
    assert turns[0].resource["service.name"] == "soulflow"
    assert node_b.stop() == 0


def test_a_run_resumed_on_takeover_continues_the_trace_of_its_turn(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread, collector: CollectorThread) -> None:
    """No message is pending (the approval request answered it): B's takeover loop resumes
    the run from Redis, and its span hangs under A's turn through the run's first event."""
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    chat = chat_held_by(node_a, node_b)
    reading(telegram)
    fake_llm.script_tool_call("exec", {"command": "echo run >> \"$HOME/ran.txt\"; sleep 30",
                                       "network": True})  # always asks for approval
    fake_llm.script_reply("It was cut off; I did not run it again.")
    post(telegram, "fetch something slowly", chat)
    approval = wait_for(lambda: next(iter(node_a.state()["approvals"]), None),
                        what="the approval on A")
    assert node_a.api("POST", "/api/approvals/decide", json={
        "run_id": approval["run_id"], "approval_id": approval["approval_id"],
        "decision": "approve"}).status_code == 200
    wait_for(lambda: ran(node_a), what="the approved tool to start on A")
    wait_for(lambda: node_a.state()["queues"]["inbound_pending"] == 0,
             what="no message pending for the run")
    turn = wait_for(lambda: named(collector, "soulflow.turn"), what="A's turn span")[0]
    node_a.kill()
    wait_for(lambda: "It was cut off; I did not run it again." in sent(telegram, chat),
             timeout=30, what="B to resume the run and answer")
    runs = wait_for(lambda: [s for s in named(collector, "invoke_agent soulflow")
                             if s.attributes.get("soulflow.run.resumed")
                             and s.parent_span_id == turn.span_id
                             and s.trace_id == turn.trace_id], what="B's resumed run span")
    assert runs
    assert node_b.stop() == 0
