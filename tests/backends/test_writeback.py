"""The agent's hot stores on a started Redis backend queue their writes for one task
(`backend:writeback`, soulflow/backends/redis/writeback.py): the node reads its own writes at
once, a turn's events go to Redis as one script call, a `settle()` returns once they are
stored, a write another node fenced out is reported to the run's driver, and a Redis that is
away or answers late loses nothing and blocks nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from soulflow.agent.run import events as ev
from soulflow.backends.base import RunMoved, UsageKey, UsageTotals
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import AgentKeys
from soulflow.backends.redis.runs import RedisRunJournal
from soulflow.backends.redis.sessions import RedisSessionStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.usage import RedisUsageStore
from soulflow.contracts import ChatRef
from soulflow.errors import StoreUnavailable
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer
from tests.waiting import loop_gaps, until

CHAT = ChatRef("telegram", "42", sender_id="u1", requester_id="u1", session_key="telegram:42")


@pytest.fixture
async def node(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[RedisBackend]:
    backend = _backend(redis_server.url, tmp_path.name)
    await backend.start()
    yield backend
    await backend.stop()


def _backend(url: str, prefix: str, *, write_delay_s: float = 0.5,
             **options: Any) -> RedisBackend:
    return RedisBackend(AsyncStoreRedis.from_url(url, **options), node_id="node-a",
                        prefix=f"wb{prefix}:", partitions=4, url=url,
                        write_delay_s=write_delay_s)


def _other_node(backend: RedisBackend) -> StateRedis:
    """Another daemon's view of the same keys: no writer, nothing cached."""
    return StateRedis(sync_client(backend.url), backend.keys.prefix)


def _commands(url: str, name: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def _turn(journal: RedisRunJournal, run_id: str, *, inbound_key: str = "telegram:42:1") -> None:
    journal.append(run_id, ev.Event(ev.RUN_STARTED, {
        "run_id": run_id, "chat": CHAT.to_dict(), "text": "hi", "history": [],
        "inbound_key": inbound_key, "parent_run": None, "max_turns": 5}))
    journal.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "hello", "tool_calls": []}))
    journal.append(run_id, ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "hello"}))


async def test_a_turn_is_read_at_once_and_stored_as_one_script_call(
        node: RedisBackend, redis_server: RedisServer) -> None:
    journal = node.runs
    await until(lambda: node.writer.running)
    before = _commands(redis_server.url, "evalsha")
    _turn(journal, "run_1")
    assert journal.state("run_1").status == ev.COMPLETED  # this node: at once
    other = RedisRunJournal(_other_node(node))
    assert other.events("run_1") == []  # not in Redis yet
    await journal.settle("run_1")
    assert [e.type for e in other.events("run_1")] == [ev.RUN_STARTED, ev.MODEL_TURN, ev.DONE]
    assert other.state("run_1").final == "hello"
    assert _commands(redis_server.url, "evalsha") - before == 1


async def test_an_unfinished_run_is_found_before_and_after_it_is_written(
        node: RedisBackend) -> None:
    journal = node.runs
    await until(lambda: node.writer.running)
    journal.append("run_2", ev.Event(ev.RUN_STARTED, {
        "run_id": "run_2", "chat": CHAT.to_dict(), "text": "hi", "history": [],
        "inbound_key": "telegram:42:2", "parent_run": None, "max_turns": 5}))
    assert journal.find(inbound_key="telegram:42:2") == ["run_2"]
    assert await journal.find_inbound("telegram:42:2", "telegram:42") == ["run_2"]
    assert journal.find(chat_key="telegram:42") == ["run_2"]
    await journal.settle("run_2")
    other = RedisRunJournal(_other_node(node))
    assert other.find(inbound_key="telegram:42:2") == ["run_2"]
    assert other.find(chat_key="telegram:42", statuses=frozenset({ev.RUNNING})) == ["run_2"]


async def test_sessions_read_their_own_records_and_store_them_on_settle(
        node: RedisBackend) -> None:
    sessions = node.sessions
    await until(lambda: node.writer.running)
    await sessions.preload("telegram:42", "telegram:42")
    sessions.append("telegram:42", {"role": "user", "content": "one"})
    sessions.append("telegram:42", {"role": "assistant", "content": "two"})
    assert [r["content"] for r in sessions.last("telegram:42", 5)] == ["one", "two"]
    other = RedisSessionStore(_other_node(node))
    assert other.last("telegram:42", 5) == []
    await sessions.settle("telegram:42")
    assert [r["content"] for r in other.last("telegram:42", 5)] == ["one", "two"]
    assert other.list_sessions()[0].key == "telegram:42"


async def test_usage_is_summed_and_written_when_its_time_comes(
        redis_server: RedisServer, tmp_path: Path) -> None:
    backend = _backend(redis_server.url, tmp_path.name, write_delay_s=0.05)
    await backend.start()
    try:
        usage = backend.usage
        await until(lambda: backend.writer.running)
        key = UsageKey("2026-11-27", "openai", "gpt", "telegram:42", "telegram:u1", "message")
        for _ in range(3):
            usage.add(key, UsageTotals(1, 10, 5, 0.25))
        assert usage.days("2026-11-27") == [(key, UsageTotals(3, 30, 15, 0.75))]
        await until(lambda: backend.writer.batches >= 1)
        stored = RedisUsageStore(_other_node(backend)).days("2026-11-27")
        assert stored == [(key, UsageTotals(3, 30, 15, 0.75))]
    finally:
        await backend.stop()


async def test_a_run_another_node_took_over_is_refused_and_its_driver_told(
        node: RedisBackend, redis_server: RedisServer) -> None:
    journal = node.runs
    await until(lambda: node.writer.running)
    journal.append("run_3", ev.Event(ev.RUN_STARTED, {
        "run_id": "run_3", "chat": CHAT.to_dict(), "text": "hi", "history": [],
        "inbound_key": "telegram:42:3", "parent_run": None, "max_turns": 5}))
    await journal.settle("run_3")
    # the chat's new holder claims the run under a newer lease token
    fences = AgentKeys(node.keys.prefix).runs_fence
    redis.Redis.from_url(redis_server.url).hset(fences, "run_3", 10**9)
    journal.append("run_3", ev.Event(ev.MODEL_TURN, {"content": "late", "tool_calls": []}))
    with pytest.raises(RunMoved):
        await journal.settle("run_3")
    other = RedisRunJournal(_other_node(node))
    assert [e.type for e in other.events("run_3")] == [ev.RUN_STARTED]


async def test_redis_away_keeps_the_queue_and_a_lost_answer_is_not_written_twice(
        redis_server: RedisServer, tmp_path: Path) -> None:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    backend = _backend(proxy.url, tmp_path.name, socket_timeout=0.5)
    await backend.start()
    try:
        journal, sessions = backend.runs, backend.sessions
        await until(lambda: backend.writer.running)
        proxy.blackhole()  # the batch reaches nobody yet; it lands once the proxy forwards
        _turn(journal, "run_4")
        sessions.append("telegram:42", {"role": "user", "content": "kept"})
        with pytest.raises(StoreUnavailable):
            await journal.settle("run_4")
        assert journal.state("run_4").final == "hello"  # still this node's, still queued
        writes = backend.status()["writes"]
        assert writes["failing_since"] is not None and writes["last_error"]
        proxy.restore()  # the held batch reaches Redis now; the writer sends it again
        await journal.settle("run_4")
        await sessions.settle("telegram:42")
        assert backend.status()["writes"]["failing_since"] is None
    finally:
        await backend.stop()
        await proxy.close()
    direct = StateRedis(sync_client(redis_server.url), backend.keys.prefix)
    assert [e.type for e in RedisRunJournal(direct).events("run_4")] == [
        ev.RUN_STARTED, ev.MODEL_TURN, ev.DONE]
    assert [r["content"] for r in RedisSessionStore(direct).last("telegram:42", 9)] == ["kept"]


async def test_a_clean_stop_writes_what_is_queued(redis_server: RedisServer,
                                                   tmp_path: Path) -> None:
    backend = _backend(redis_server.url, tmp_path.name)
    await backend.start()
    await until(lambda: backend.writer.running)
    backend.runs.append("run_5", ev.Event(ev.RUN_STARTED, {
        "run_id": "run_5", "chat": CHAT.to_dict(), "text": "hi", "history": [],
        "inbound_key": None, "parent_run": None, "max_turns": 5}))
    backend.sessions.append("telegram:42", {"role": "user", "content": "last words"})
    await backend.stop()
    direct = StateRedis(sync_client(redis_server.url), backend.keys.prefix)
    assert len(RedisRunJournal(direct).events("run_5")) == 1
    assert RedisSessionStore(direct).last("telegram:42", 1)[0]["content"] == "last words"


async def test_a_slow_redis_does_not_hold_the_event_loop(redis_server: RedisServer,
                                                        tmp_path: Path) -> None:
    """A turn's store calls wait for a Redis that answers 0.2 s late each way without holding
    the loop: a ticker beside them keeps its pace. (The proxy runs on this test's loop: a
    call that held the loop would also hold the proxy, and time out.)"""
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    backend = _backend(proxy.url, tmp_path.name)
    await backend.start()
    try:
        journal, sessions = backend.runs, backend.sessions
        await until(lambda: backend.writer.running)
        proxy.delay_s = 0.2
        async with loop_gaps() as gaps:
            for n in range(3):  # three turns as the agent makes them
                await journal.preload("telegram:42")
                assert journal.find(chat_key="telegram:42") == []
                await sessions.preload("telegram:42", "telegram:42")
                sessions.last("telegram:42", 5)
                sessions.append("telegram:42", {"role": "user", "content": f"m{n}"})
                assert await journal.find_inbound(f"telegram:42:{n}", "telegram:42") == []
                _turn(journal, f"run_slow_{n}", inbound_key=f"telegram:42:{n}")
                await journal.settle(f"run_slow_{n}")
                sessions.append("telegram:42", {"role": "assistant", "content": f"a{n}"})
                await sessions.settle("telegram:42")
        assert max(gaps) < 0.3, f"the loop was held {max(gaps):.2f} s"
        direct = RedisSessionStore(StateRedis(sync_client(redis_server.url),
                                              backend.keys.prefix))
        assert [r["content"] for r in direct.last("telegram:42", 6)] == [
            "m0", "a0", "m1", "a1", "m2", "a2"]
    finally:
        await backend.stop()
        await proxy.close()

