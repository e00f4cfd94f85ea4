"""Redis run journals: a node reads a run it is driving from its cache, without a round trip,
only while it still holds the lease it last appended under; once that lease is gone (or taken
anew) it reads through again and sees what the chat's new holder wrote."""

from __future__ import annotations

from soulflow.agent.run import events as ev
from soulflow.backends.redis.sync_client import StateRedis
from tests.backends.agent_stores import AgentStores, redis_stores
from tests.backends.test_contract_runs import Tokens, start, taken_mid_run, tool_turn

__all__ = ["redis_stores"]  # fixture


def lrange_calls(state: StateRedis) -> int:
    stats = state.client.info("commandstats")
    return int(stats.get("cmdstat_lrange", {}).get("calls", 0))


def test_a_run_driven_under_a_held_lease_is_read_from_the_cache(
        redis_stores: AgentStores) -> None:
    assert redis_stores.state is not None
    lease = Tokens()
    lease.token = 5
    node = redis_stores.runs(fence=lease)
    start(node, "run_o")
    tool_turn(node, "run_o", "t1.c1", "x")
    before = lrange_calls(redis_stores.state)
    state = node.state("run_o")
    assert state.turns == 1 and state.pending_calls
    assert [e.type for e in node.events("run_o")] == [ev.RUN_STARTED, ev.MODEL_TURN]
    assert node.claim("run_o")
    done = node.append("run_o", ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "ok"}))
    assert node.state("run_o") is done and node.events("run_o")[-1].type == ev.DONE
    assert lrange_calls(redis_stores.state) == before  # nobody else could have written
    lease.token = None  # the lease lapsed: read through from now on
    node.state("run_o")
    assert lrange_calls(redis_stores.state) == before + 1
    assert node.state("run_o").finished


def test_a_node_that_lost_the_lease_sees_the_new_holders_events(
        redis_stores: AgentStores) -> None:
    lease_a, lease_b, node_a, node_b = taken_mid_run(redis_stores, "run_m")
    lease_a.token, lease_b.token = None, 6  # the partition moved to B
    assert node_b.claim("run_m")
    node_b.append("run_m", ev.Event(ev.TOOL_RESULT, {
        "id": "t1.c1", "name": "record", "status": "ok", "output": "done"}))
    assert node_a.state("run_m").pending_calls == []
    node_b.append("run_m", ev.Event(ev.MODEL_TURN, {"content": "more", "tool_calls": []}))
    assert node_a.state("run_m").turns == 2
    lease_b.token, lease_a.token = None, 7  # and back to A under a newer token
    assert node_a.claim("run_m")
    state = node_a.append("run_m", ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "ok"}))
    assert state.finished and state.turns == 2
    assert [e.type for e in node_a.events("run_m")] == [
        e.type for e in redis_stores.runs().events("run_m")] == [
        ev.RUN_STARTED, ev.MODEL_TURN, ev.TOOL_RESULT, ev.MODEL_TURN, ev.DONE]
