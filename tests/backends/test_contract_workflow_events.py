"""Workflow events, the same assertions against the files and Redis: every field kept and
redacted, duplicates dropped across restarts (and across nodes on Redis), the task's story and
status kept in step, the newest events read back for the dashboard."""

from __future__ import annotations

import json

from soulflow.events.hub import EventHub
from soulflow.events.workflow import WorkflowEvent
from soulflow.tasks import TaskEvent, TaskGraph, TaskState, TaskStatus, run_task_loop
from soulflow.tasks.answers import require
from tests.backends.task_stores import TaskWorld, redis_world, world
from tests.tasks.helpers import Toolbox, echo, tool

__all__ = ["redis_world", "world"]  # fixtures, imported for pytest

SECRET = "hunter2-super-secret-value"
FIELDS = {"event_id", "run_id", "task_id", "agent_id", "phase", "summary", "payload",
          "provider", "channel", "chat_id", "thread_id", "source", "detail_file", "at"}


async def test_an_event_is_kept_whole_redacted_and_published(world: TaskWorld) -> None:
    hub = EventHub()
    subscription = hub.subscribe()
    events = world.events(secret=SECRET, hub=hub)
    record = await events.append(WorkflowEvent(
        "progress", f"using {SECRET}", task_id="t-1", run_id="r-1", agent_id="writer",
        payload={"api_key": "abc123", "note": SECRET}, provider="slack", channel="slack",
        chat_id="C1", thread_id="17.2", source="agent", event_id="e-1"))
    assert record is not None
    [stored] = world.events().recent(10)  # read back by a fresh service (another node)
    assert set(stored) == FIELDS and stored == record
    assert SECRET not in json.dumps(stored) and "abc123" not in json.dumps(stored)
    assert stored["summary"] == "using [REDACTED]"
    live = await subscription.next(1)
    assert live is not None and live.kind == "workflow" and live.data == stored


async def test_duplicates_are_dropped_even_after_a_restart(world: TaskWorld) -> None:
    events = world.events()
    assert await events.append(WorkflowEvent("done", "x", event_id="same")) is not None
    assert await events.append(WorkflowEvent("done", "x", event_id="same")) is None
    await events.close()
    again = world.events()
    assert again.seen("same") and not again.seen("other")
    assert await again.append(WorkflowEvent("done", "x", event_id="same")) is None
    assert [r["event_id"] for r in again.recent(10)] == ["same"]


async def test_recent_reads_the_newest_in_order(world: TaskWorld) -> None:
    events = world.events()
    for n in range(12):
        await events.append(WorkflowEvent("progress", f"#{n}", task_id=f"t-{n % 2}",
                                          event_id=f"e-{n}"))
    assert [r["summary"] for r in events.recent(3)] == ["#9", "#10", "#11"]
    assert [r["summary"] for r in events.recent(2, task_id="t-0")] == ["#8", "#10"]


async def test_a_bound_store_gets_the_story_and_the_status(world: TaskWorld) -> None:
    store, events = world.store(), world.events()
    events.bind_task_store(store)
    graph = TaskGraph([tool("a", params={"k": 1}), tool("b", depends_on=["a"])])
    task = TaskState("t-7", "Two steps", graph, provider="telegram", chat_id="99")
    await store.add(task)
    await run_task_loop(task, store, Toolbox({"echo": echo}).executors(),
                        emit=events.emit_task_event)
    records = events.recent(20, task_id="t-7")
    assert [(r["phase"], r["agent_id"]) for r in records] == [
        ("assign", "a"), ("done", "a"), ("assign", "b"), ("done", "b"), ("done", "")]
    location = store.detail_location("t-7")
    expected = "runtime/tasks/details/t-7.md" if world.kind == "file" else str(location)
    assert {r["detail_file"] for r in records} == {expected}
    assert records[0]["run_id"] == "t-7/a#1" and records[0]["event_id"] == "t-7:a:assign:1"
    assert records[0]["source"] == "task_loop"
    assert records[0]["provider"] == "telegram" and records[0]["chat_id"] == "99"
    assert records[-1]["event_id"].startswith("t-7:task:completed:")
    story = world.store().detail_tail("t-7", 10)
    assert len(story) == 5 and story[-1].endswith("task completed")
    assert any("**done** b:" in line for line in story), story
    # an event from elsewhere (an operator) moves the task's status with it
    await events.append(WorkflowEvent("done", "stopped by the operator", task_id="t-7",
                                      payload={"status": "cancelled"}))
    assert require(world.store(), "t-7").status is TaskStatus.CANCELLED
    # a replayed step is deduped: no second event, no second line of the story
    await events.emit_task_event(TaskEvent(task, "assign", "again", "t-7:a:assign:1", "a"))
    assert len(events.recent(100, task_id="t-7")) == 6
    assert len(world.store().detail_tail("t-7", 100)) == 6


async def test_two_nodes_replaying_one_step_record_it_once(redis_world: TaskWorld) -> None:
    node_a, node_b = redis_world.events(), redis_world.events()
    event = WorkflowEvent("done", "a completed", task_id="t-9", event_id="t-9:a:done:1")
    assert await node_a.append(event) is not None
    assert await node_b.append(event) is None  # the node that took the chat over replays it
    assert [r["event_id"] for r in node_b.recent(10)] == ["t-9:a:done:1"]


async def test_the_stream_is_capped(redis_world: TaskWorld) -> None:
    events = redis_world.events()
    log = events.log
    log.max_events = 10  # type: ignore[attr-defined]
    for n in range(300):
        await events.append(WorkflowEvent("progress", f"#{n}", event_id=f"e-{n}"))
    client = redis_world.state().client
    length = client.xlen(redis_world.keys.workflow_events)
    assert 10 <= length < 300  # MAXLEN ~ trims whole blocks: about the cap, never unbounded
    assert events.recent(1)[0]["summary"] == "#299"
