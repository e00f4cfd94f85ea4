"""The reads of the daemon's loops on a started Redis backend wait for Redis without holding
the event loop: the runs the watchdog, the dashboard, resuming and quiet turns scan
(`find_open`, read ahead), the decisions a prompt lists (`refresh`), a new person's display
name (queued with the usage counts). What they read is what another node wrote."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from soulflow.agent.run import events as ev
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.decisions import RedisDecisionStore
from soulflow.backends.redis.runs import RedisRunJournal
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.usage import RedisUsageStore
from soulflow.contracts import ChatRef
from soulflow.decision.rules import Decision
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer
from tests.waiting import loop_gaps, until

RUNNING = frozenset({ev.RUNNING})
WAITING = frozenset({ev.WAITING_APPROVAL, ev.WAITING_USER})


@pytest.fixture
async def node(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[RedisBackend]:
    backend = _backend(redis_server.url, tmp_path.name)
    await backend.start()
    await until(lambda: backend.writer.running)
    yield backend
    await backend.stop()


def _backend(url: str, prefix: str) -> RedisBackend:
    return RedisBackend(AsyncStoreRedis.from_url(url), node_id="node-a", prefix=f"lr{prefix}:",
                        partitions=4, url=url)


def _other_node(backend: RedisBackend) -> StateRedis:
    """Another daemon's view of the same keys: no writer, nothing cached."""
    return StateRedis(sync_client(backend.url), backend.keys.prefix)


def _commands(url: str, name: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def _start(journal: RedisRunJournal, run_id: str, chat_id: str, **extra: Any) -> None:
    chat = ChatRef("telegram", chat_id, sender_id="u1", requester_id="u1",
                   session_key=f"telegram:{chat_id}", **extra)
    journal.append(run_id, ev.Event(ev.RUN_STARTED, {
        "run_id": run_id, "chat": chat.to_dict(), "text": "hi", "history": [],
        "inbound_key": f"telegram:{chat_id}:{run_id}", "parent_run": None, "max_turns": 5}))


def _ask(journal: RedisRunJournal, run_id: str) -> None:
    journal.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "", "tool_calls": [
        {"id": "c1", "name": "shell", "arguments": {"command": "ls"}}]}))
    journal.append(run_id, ev.Event(ev.APPROVAL_REQUESTED, {
        "approval_id": "a1", "call_id": "c1", "tool": "shell", "arguments": {},
        "reason": "runs a command"}))


async def test_open_runs_of_other_nodes_are_found_and_read_ahead(
        node: RedisBackend, redis_server: RedisServer) -> None:
    other = RedisRunJournal(_other_node(node))
    _start(other, "run_a", "1")
    _start(other, "run_b", "2")
    _ask(other, "run_b")
    _start(other, "run_c", "3")
    other.append("run_c", ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "ok"}))
    journal = node.runs
    assert await journal.find_open(RUNNING) == ["run_a"]
    assert await journal.find_open(WAITING) == ["run_b"]
    assert await journal.find_open() == ["run_a", "run_b"]  # finished runs are not open
    assert await journal.find_open(chats="telegram:2".__eq__) == ["run_b"]
    reads = _commands(redis_server.url, "lrange")
    assert journal.state("run_b").status == ev.WAITING_APPROVAL  # read ahead: no round trip
    assert [e.type for e in journal.events("run_a")] == [ev.RUN_STARTED]
    assert _commands(redis_server.url, "lrange") == reads
    other.append("run_a", ev.Event(ev.MODEL_TURN, {"content": "more", "tool_calls": []}))
    await journal.find_open(RUNNING)  # only the entries after those known are read
    assert journal.state("run_a").turns == 1
    assert _commands(redis_server.url, "lrange") == reads + 1


async def test_this_nodes_queued_events_count_before_redis_has_them(
        node: RedisBackend) -> None:
    journal = node.runs
    _start(journal, "run_q", "7")  # queued for the writer, not in Redis yet
    assert await journal.find_open(RUNNING) == ["run_q"]
    _ask(journal, "run_q")
    assert await journal.find_open(RUNNING) == []
    assert await journal.find_open(WAITING, chats="telegram:7".__eq__) == ["run_q"]
    await journal.settle("run_q")
    assert await journal.find_open(WAITING) == ["run_q"]
    assert journal.state("run_q").status == ev.WAITING_APPROVAL


async def test_decisions_are_read_ahead_and_another_nodes_show_after_a_refresh(
        node: RedisBackend, redis_server: RedisServer) -> None:
    now = [100.0]
    decisions = RedisDecisionStore(node.state, client=node.client, clock=lambda: now[0])
    other = RedisDecisionStore(_other_node(node))
    other.put_unless_kept(Decision("language", "Korean", 1, "cli", 1.0))
    await decisions.refresh()
    reads = _commands(redis_server.url, "hgetall")
    assert decisions.all()["language"].value == "Korean"
    assert decisions.get("language") is not None  # (a single read is still one round trip)
    other.put_unless_kept(Decision("deploy", "friday", 0, "cli", 2.0))
    assert "deploy" not in decisions.all()  # not read yet: the copy answers
    await decisions.refresh()  # within REFRESH_EVERY_S of the last: reads nothing
    assert _commands(redis_server.url, "hgetall") == reads
    now[0] += 1
    await decisions.refresh()
    assert set(decisions.all()) == {"language", "deploy"}
    decisions.put_unless_kept(Decision("tone", "brief", 0, "chat", 3.0))  # this node's own
    decisions.delete("deploy")
    assert set(decisions.all()) == {"language", "tone"}
    assert set(other.all()) == {"language", "tone"}


async def test_a_display_name_goes_with_the_usage_batch(
        node: RedisBackend, redis_server: RedisServer) -> None:
    usage = node.usage
    before = _commands(redis_server.url, "hset") + _commands(redis_server.url, "multi")
    usage.name("telegram:u1", "Alice")
    usage.name("telegram:u2", "Bob")
    usage.name("telegram:u1", "Alice B.")  # the newest of a person's names counts
    assert usage.names() == {"telegram:u1": "Alice B.", "telegram:u2": "Bob"}  # queued
    await until(lambda: RedisUsageStore(_other_node(node)).names() == {
        "telegram:u1": "Alice B.", "telegram:u2": "Bob"})
    assert _commands(redis_server.url, "multi") + _commands(redis_server.url, "hset") \
        == before + 1  # one HSET for both, in the writer's batch (a pipeline, no MULTI)


async def test_a_slow_redis_does_not_hold_the_loops_reads(redis_server: RedisServer,
                                                          tmp_path: Path) -> None:
    """Each read below waits for a Redis 0.2 s away each way while a ticker keeps its pace
    (the proxy runs on this loop too: a read that held the loop would time out)."""
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    backend = _backend(proxy.url, tmp_path.name)
    await backend.start()
    try:
        await until(lambda: backend.writer.running)
        other = RedisRunJournal(StateRedis(sync_client(redis_server.url),
                                           backend.keys.prefix))
        _start(other, "run_s", "9")
        _ask(other, "run_s")
        RedisDecisionStore(StateRedis(sync_client(redis_server.url), backend.keys.prefix)) \
            .put_unless_kept(Decision("language", "Korean", 1, "cli", 1.0))
        proxy.delay_s = 0.2
        async with loop_gaps() as gaps:
            journal = backend.runs
            assert await journal.find_open(WAITING, chats="telegram:9".__eq__) == ["run_s"]
            assert journal.state("run_s").open_approval() is not None
            await backend.decisions.refresh()
            assert backend.decisions.all()["language"].value == "Korean"
            backend.usage.name("telegram:u9", "Zoe")
            listed = await backend.offload(backend.sessions.list_sessions, 20)  # the dashboard's
            assert listed == []
        assert max(gaps) < 0.3, f"the loop was held {max(gaps):.2f} s"
    finally:
        await backend.stop()
        await proxy.close()
