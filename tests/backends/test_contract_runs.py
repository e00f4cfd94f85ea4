"""Agent run journals, against the file store and the Redis store: the same assertions. A run
is its events; the state is their fold; unfinished runs are found by inbound key, chat and
status, after a restart (file) or on another node (redis); the interrupted-tool rules apply
to a run resumed there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import INTERRUPTED, AgentLoop
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.base import RunJournal, RunMoved
from soulflow.backends.redis.runs import RedisRunJournal
from soulflow.contracts import ChatRef
from tests.agent.recorder import Recorder
from tests.agent.test_run_loop import ScriptedModel, call, reply
from tests.backends.agent_stores import AgentStores, redis_stores, stores

__all__ = ["redis_stores", "stores"]  # fixtures

TELEGRAM = ChatRef("telegram", "42", sender_id="u1", requester_id="u1",
                   session_key="telegram:42")


def start(store: RunJournal, run_id: str, *, chat: ChatRef = TELEGRAM,
          inbound_key: str | None = None, text: str = "do it") -> None:
    store.append(run_id, ev.Event(ev.RUN_STARTED, {
        "run_id": run_id, "chat": chat.to_dict(), "text": text, "history": [],
        "inbound_key": inbound_key, "parent_run": None, "max_turns": 5}))


def tool_turn(store: RunJournal, run_id: str, call_id: str, value: str) -> None:
    store.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "", "tool_calls": [
        {"id": call_id, "name": "record", "arguments": {"value": value}}]}))


def test_runs_fold_and_are_found_until_they_finish(stores: AgentStores) -> None:
    finished: list[tuple[str, float, bool]] = []
    store = stores.runs(on_finished=lambda *done: finished.append(done))
    start(store, "run_a", inbound_key="telegram:42:1")
    start(store, "run_b", chat=ChatRef("slack", "C1"), inbound_key="slack:C1:9")
    start(store, "run_c", inbound_key="telegram:42:3")
    tool_turn(store, "run_a", "t1.c1", "x")
    store.append("run_a", ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c1", "name": "record"}))
    state = store.append("run_c", ev.Event(ev.APPROVAL_REQUESTED, {
        "approval_id": "ap_00000001", "call_id": "t1.c9", "tool": "exec",
        "arguments": {"cmd": "ls"}, "reason": "runs code"}))
    assert state.status == ev.WAITING_APPROVAL
    for current in (store, stores.reopen_runs(store)):
        assert current.find() == ["run_a", "run_b", "run_c"]
        assert current.find(inbound_key="telegram:42:1") == ["run_a"]
        assert current.find(inbound_key="telegram:42:2") == []
        assert current.find(chat_key="telegram:42") == ["run_a", "run_c"]
        assert current.find(chat_key="telegram:42",
                            statuses=frozenset({ev.WAITING_APPROVAL})) == ["run_c"]
        assert current.find(statuses=frozenset({ev.RUNNING})) == ["run_a", "run_b"]
        state = current.state("run_a")
        assert state.run_id == "run_a" and state.chat.key == "telegram:42"
        assert state.chat.requester_id == "u1" and state.inbound_key == "telegram:42:1"
        assert state.started_calls == {"t1.c1"} and state.turns == 1
        assert current.state("run_c").open_approval()["approval_id"] == "ap_00000001"
        assert [e.type for e in current.events("run_a")] == [
            ev.RUN_STARTED, ev.MODEL_TURN, ev.TOOL_CALL_STARTED]
    store = stores.runs(on_finished=lambda *done: finished.append(done))
    done = store.append("run_b", ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "ok"}))
    assert done.finished and done.final == "ok"
    assert [(status, sub) for status, _, sub in finished] == [(ev.COMPLETED, False)]
    assert finished[0][1] >= 0
    for current in (store, stores.reopen_runs(store)):
        assert current.find() == ["run_a", "run_c"]
        assert current.find(inbound_key="slack:C1:9") == []
        assert current.find(chat_key="slack:C1") == []
        assert current.find(chat_key="telegram:42") == ["run_a", "run_c"]
        assert current.state("run_b").status == ev.COMPLETED  # still readable
        assert [e.type for e in current.events("run_b")][-1] == ev.DONE


def test_what_is_stored_is_redacted(stores: AgentStores) -> None:
    def redact(record: Any) -> Any:
        if isinstance(record, str):
            return record.replace("sk-live-123456", "[REDACTED]")
        if isinstance(record, dict):
            return {k: redact(v) for k, v in record.items()}
        if isinstance(record, list):
            return [redact(v) for v in record]
        return record

    store = stores.runs(redact=redact)
    start(store, "run_r", text="use sk-live-123456 please")
    assert store.state("run_r").conversation[-1]["content"] == "use sk-live-123456 please"
    again = stores.reopen_runs(store)
    assert again.state("run_r").conversation[-1]["content"] == "use [REDACTED] please"


def _loop(store: RunJournal, tmp_path: Path, model: ScriptedModel, tool: Recorder) -> AgentLoop:
    registry = ToolRegistry()
    registry.register(tool)

    def context(state: Any, approved: bool) -> ToolContext:
        return ToolContext(workspace=tmp_path, chat=state.chat, approved=approved)

    return AgentLoop(store, lambda: model, registry, lambda _chat: "system", context, max_turns=5)


async def test_a_run_resumes_elsewhere_with_the_interrupted_tool_rules(
        stores: AgentStores, tmp_path: Path) -> None:
    """A tool call started and never finished (its node died) is reported to the model as
    interrupted, not run again, unless the tool is idempotent: after a restart (file) and on
    another node (redis) alike."""
    tool = Recorder()
    store = stores.runs()
    start(store, "run_i")
    tool_turn(store, "run_i", "t1.c1", "x")
    store.append("run_i", ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c1", "name": "record"}))
    start(store, "run_j")
    tool_turn(store, "run_j", "t1.c2", "y")
    store.append("run_j", ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c2", "name": "record"}))
    model = ScriptedModel(reply("noted"))
    elsewhere = _loop(stores.reopen_runs(store), tmp_path, model, tool)
    assert elsewhere.store.claim("run_i")
    outcome = await elsewhere.drive("run_i")
    assert (outcome.status, outcome.text, tool.calls) == (ev.COMPLETED, "noted", [])
    assert model.seen[-1][-1]["content"] == INTERRUPTED
    tool.idempotent = True
    model.turns = [reply("again")]
    assert (await elsewhere.drive("run_j")).text == "again" and tool.calls == ["y"]
    assert stores.runs().find() == []


async def test_a_waiting_approval_is_decided_on_another_node(stores: AgentStores,
                                                             tmp_path: Path) -> None:
    tool = Recorder(risky=True)
    node_a = _loop(stores.runs(), tmp_path, ScriptedModel(call("record", value="v")), tool)
    run_id = node_a.begin(chat=TELEGRAM, text="record v", history=[], inbound_key="telegram:42:5")
    outcome = await node_a.drive(run_id)
    assert outcome.status == ev.WAITING_APPROVAL and outcome.approval_id
    node_b = _loop(stores.reopen_runs(node_a.store), tmp_path, ScriptedModel(reply("recorded")),
                   tool)
    assert node_b.store.find(chat_key="telegram:42",
                             statuses=frozenset({ev.WAITING_APPROVAL})) == [run_id]
    node_b.decide(run_id, outcome.approval_id, "approve", by="u1", by_provider="telegram")
    finished = await node_b.drive(run_id)
    assert (finished.status, finished.text, tool.calls) == (ev.COMPLETED, "recorded", ["v"])


class Tokens:
    """Partition lease tokens per node, as the backend's `partition_fence` would give."""

    def __init__(self) -> None:
        self.token: int | None = None

    def __call__(self, chat_key: str) -> int | None:
        return self.token


def taken_mid_run(stores: AgentStores, run_id: str
                  ) -> tuple[Tokens, Tokens, RunJournal, RunJournal]:
    """Nodes A and B on one Redis: A holds the chat's partition (token 5) and is one tool turn
    into `run_id`; B holds nothing yet. Returns both nodes' tokens, then their stores."""
    lease_a, lease_b = Tokens(), Tokens()
    lease_a.token = 5
    node_a = stores.runs(fence=lease_a)
    node_b = stores.runs(fence=lease_b)
    start(node_a, run_id)
    tool_turn(node_a, run_id, "t1.c1", "x")
    return lease_a, lease_b, node_a, node_b


def test_a_run_taken_over_refuses_the_old_holders_writes(redis_stores: AgentStores) -> None:
    """Node A drove the run under partition lease token 5; node B took the partition (token 6)
    and claimed the run: A's late writes are refused with RunMoved, B's go on."""
    lease_a, lease_b, node_a, node_b = taken_mid_run(redis_stores, "run_f")
    assert not node_b.claim("run_f")  # B does not hold the chat: never drive it
    lease_b.token = 6
    assert node_b.claim("run_f")
    with pytest.raises(RunMoved):
        node_a.append("run_f", ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c1", "name": "record"}))
    assert not node_a.claim("run_f")
    state = node_b.append("run_f", ev.Event(ev.TOOL_RESULT, {
        "id": "t1.c1", "name": "record", "status": "ok", "output": "done"}))
    assert state.pending_calls == [] and not state.started_calls
    assert [e.type for e in node_a.events("run_f")] == [ev.RUN_STARTED, ev.MODEL_TURN,
                                                        ev.TOOL_RESULT]
    node_b.append("run_f", ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "ok"}))
    assert node_a.claim("run_f")  # finished: nothing left to take


def test_a_node_reads_runs_another_node_writes(redis_stores: AgentStores) -> None:
    """Each node caches what it read of a run and reads only the newer entries on each call,
    so a state is never stale, whoever wrote last."""
    node_a, node_b = redis_stores.runs(), redis_stores.runs()
    start(node_a, "run_s", inbound_key="telegram:42:8")
    assert node_b.state("run_s").turns == 0
    tool_turn(node_a, "run_s", "t1.c1", "x")
    assert node_b.state("run_s").turns == 1 and node_b.find(inbound_key="telegram:42:8")
    node_b.append("run_s", ev.Event(ev.INFO_REQUESTED, {"call_id": "t1.c1", "question": "?"}))
    assert node_a.state("run_s").status == ev.WAITING_USER
    assert node_a.find(statuses=frozenset({ev.WAITING_USER})) == ["run_s"]
    node_b.append("run_s", ev.Event(ev.USER_REPLY, {"text": "blue"}))
    # A's copy is one event behind: its append folds B's event in first, then writes
    state = node_a.append("run_s", ev.Event(ev.MODEL_TURN, {"content": "ok", "tool_calls": []}))
    assert state.status == ev.RUNNING and state.turns == 2
    assert state.conversation[-2]["content"] == "The user answered: blue"
    assert [e.type for e in node_b.events("run_s")] == [
        ev.RUN_STARTED, ev.MODEL_TURN, ev.INFO_REQUESTED, ev.USER_REPLY, ev.MODEL_TURN]


def test_a_node_forgets_runs_past_its_cache_and_reads_them_again(
        redis_stores: AgentStores) -> None:
    assert redis_stores.state is not None
    store = RedisRunJournal(redis_stores.state, cached_runs=2)
    for n in range(4):
        start(store, f"run_{n}", inbound_key=f"telegram:42:{n}")
        tool_turn(store, f"run_{n}", f"t1.c{n}", str(n))
    assert len(store._runs) == 2  # the two most recently used
    for n in range(4):  # each read again from Redis as needed, every state whole
        state = store.append(f"run_{n}", ev.Event(ev.TOOL_CALL_STARTED, {
            "id": f"t1.c{n}", "name": "record"}))
        assert state.turns == 1 and state.started_calls == {f"t1.c{n}"}
        assert state.inbound_key == f"telegram:42:{n}"
    assert len(store._runs) == 2
