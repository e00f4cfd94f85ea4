"""The task store, the same assertions against the files and Redis (tests/backends/task_stores.py);
then what only Redis has: writes fenced by the chat's partition lease and by the revision."""

from __future__ import annotations

import pytest

from soulflow.backends import base as store_module
from soulflow.backends.redis.tasks import RedisTaskStore
from soulflow.tasks import (
    Choice,
    NodeKind,
    NodeStatus,
    TaskDecisionError,
    TaskFenced,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
)
from soulflow.tasks.answers import decide, require, set_status
from soulflow.tasks.review import Proposal
from tests.backends.task_stores import TaskWorld, redis_world, world
from tests.tasks.helpers import waiting_task

__all__ = ["redis_world", "world"]  # fixtures, imported for pytest


def graph() -> TaskGraph:
    return TaskGraph([TaskNode(id="a", kind=NodeKind.TOOL, tool="read_file")])


async def test_a_checkpoint_survives_a_restart_and_lists_by_chat(world: TaskWorld) -> None:
    store = world.store()
    task = TaskState("t-1", "one", graph(), provider="telegram", chat_id="42", created_at=10.0)
    await store.add(task)
    await store.add(TaskState("t-2", "two", graph(), provider="telegram", chat_id="7",
                              created_at=20.0))
    await store.add(TaskState("t-3", "three", graph(), provider="slack", chat_id="42",
                              status=TaskStatus.COMPLETED, created_at=30.0))
    assert task.revision == 1
    again = world.store()  # a restart (or another node reading)
    found = again.get("t-1")
    assert found is not None and found.to_dict() == task.to_dict()
    assert again.get("t-nope") is None
    assert [t.task_id for t in again.list()] == ["t-3", "t-2", "t-1"]  # newest first
    assert [t.task_id for t in again.list(limit=2)] == ["t-3", "t-2"]
    assert [t.task_id for t in again.list(provider="telegram", chat_id="42")] == ["t-1"]
    assert [t.task_id for t in again.list(chat_id="42")] == ["t-3", "t-1"]
    assert [t.task_id for t in again.list(status=TaskStatus.COMPLETED)] == ["t-3"]
    assert [t.task_id for t in again.unfinished()] == ["t-1", "t-2"]
    assert [t.task_id for t in again.unfinished(chats=lambda c: c == "telegram:7")] == ["t-2"]
    assert [t.task_id for t in await again.fetch_unfinished()] == ["t-1", "t-2"]  # /stop's
    assert [t.task_id for t in await again.fetch_unfinished(chats="telegram:7".__eq__)] == \
        ["t-2"]
    with pytest.raises(ValueError, match="already exists"):
        await again.add(TaskState("t-1", "dup", graph()))
    with pytest.raises(ValueError, match="bad task id"):
        await again.add(TaskState("../evil", "x", graph()))
    assert again.problems == []


async def test_a_finished_task_leaves_the_unfinished_list(world: TaskWorld) -> None:
    store = world.store()
    task = TaskState("t-f", "f", graph(), provider="local", chat_id="c")
    await store.add(task)
    task.status, task.result = TaskStatus.COMPLETED, {"a": 1}
    await store.checkpoint(task)
    again = world.store()
    assert again.unfinished() == []
    assert await again.fetch_unfinished() == []
    done = require(again, "t-f")
    assert done.status is TaskStatus.COMPLETED and done.result == {"a": 1}
    assert done.revision == 2
    with pytest.raises(TaskDecisionError, match="there is no task t-x"):
        require(again, "t-x")


async def test_one_unreadable_task_is_reported_and_kept_untouched(world: TaskWorld) -> None:
    good = TaskState("t-ok", "fine", graph(), created_at=1.0).to_dict()
    bad = {"task_id": "t-bad", "graph": {"nodes": [{"id": "a", "kind": "teleport"}]},
           "created_at": 2.0}
    world.plant({"t-ok": good, "t-bad": bad})
    store = world.store()
    assert [t.task_id for t in store.list()] == ["t-ok"]
    assert [t.task_id for t in store.unfinished()] == ["t-ok"]
    assert len(store.problems) == 1 and "t-bad could not be read" in store.problems[0]
    await store.checkpoint(require(store, "t-ok"))
    assert world.raw("t-bad") == bad
    assert world.raw("t-ok")["revision"] == 1


async def test_finished_tasks_are_pruned_beyond_the_limit(
        world: TaskWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "KEEP_FINISHED", 2)
    store = world.store()
    for i in range(4):
        await store.add(TaskState(f"t-{i}", str(i), graph(), status=TaskStatus.COMPLETED,
                                  provider="local", chat_id="c"))
    await store.add(TaskState("t-w", "w", graph(), status=TaskStatus.WAITING_APPROVAL,
                              provider="local", chat_id="c"))
    again = world.store()
    assert sorted(t.task_id for t in again.list()) == ["t-2", "t-3", "t-w"]
    assert sorted(t.task_id for t in again.list(provider="local", chat_id="c")) == [
        "t-2", "t-3", "t-w"]
    assert world.raw("t-0") is None


async def test_the_story_is_appended_and_read_from_the_end(world: TaskWorld) -> None:
    store = world.store()
    await store.add(TaskState("t-s", "Compare vendors", graph()))
    for n in range(8):
        await store.append_detail("t-s", f"**progress** a: step {n}", at=1_700_000_000 + n)
    location = await store.append_detail("t-s", "**done** a: completed")
    assert location == store.detail_location("t-s")
    tail = world.store().detail_tail("t-s", 3)
    assert len(tail) == 3 and all(line.startswith("- ") for line in tail)
    assert tail[0].endswith("step 6") and tail[-1].endswith("**done** a: completed")
    assert world.store().detail_tail("t-none", 3) == []
    with pytest.raises(ValueError):
        await store.append_detail("../../etc/passwd", "x")


async def test_an_answer_is_stored_before_anyone_acts_on_it(world: TaskWorld) -> None:
    store = world.store()
    await store.add(waiting_task("t-a", "c1"))
    with pytest.raises(TaskDecisionError, match="takes one of: approve, deny"):
        await decide(store, "t-a", "ok", Choice.RETRY)
    with pytest.raises(TaskDecisionError, match="nothing to decide"):
        await decide(store, "t-a", "draft", Choice.APPROVE)
    await decide(store, "t-a", "ok", Choice.APPROVE, by="dana")
    node = require(world.store(), "t-a").nodes["ok"]
    assert (node.choice, node.decided_by) == ("approve", "dana")
    assert await set_status(store, "t-a", TaskStatus.CANCELLED, "stopped by the operator")
    assert not await set_status(store, "t-a", TaskStatus.CANCELLED)
    stored = require(world.store(), "t-a")
    assert stored.status is TaskStatus.CANCELLED and stored.error == "stopped by the operator"
    with pytest.raises(TaskDecisionError, match="already cancelled"):
        await decide(world.store(), "t-a", "ok", Choice.APPROVE)


async def test_a_plan_under_review_is_found_after_a_restart(world: TaskWorld) -> None:
    proposals = world.proposals()
    plan = Proposal(chat={"provider": "telegram", "chat_id": "5", "thread_id": None},
                    requested_by="dana", request="mail the vendors", title="Mail",
                    graph=graph().to_dict(), risks=["write_file changes files"])
    assert await proposals.get("telegram:5") is None
    await proposals.put("telegram:5", plan)
    await proposals.put("telegram:6", Proposal(chat={}, requested_by="x", request="y", title="z",
                                         graph=graph().to_dict()))
    again = world.proposals()  # a restart, or the node that took the chat over
    found = await again.get("telegram:5")
    assert found == plan and found.task_graph().to_dict() == graph().to_dict()
    assert await again.pop("telegram:5") == plan
    assert await world.proposals().get("telegram:5") is None
    assert await again.pop("telegram:5") is None
    assert await world.proposals().get("telegram:6") is not None


# -- Redis only: who may write ----------------------------------------------------------------


async def test_a_write_needs_the_chat_s_current_lease(redis_world: TaskWorld) -> None:
    client = redis_world.state().client
    lease_key = f"{redis_world.prefix}lease:part:3"
    held: dict[str, tuple[str, str] | None] = {"value": None}
    store = redis_world.store(fence=lambda chat: held["value"])
    task = TaskState("t-l", "leased", graph(), provider="telegram", chat_id="9")
    with pytest.raises(TaskFenced, match="another node handles now"):
        await store.add(task)  # this node holds no lease for the chat
    assert redis_world.raw("t-l") is None
    client.set(lease_key, "node-a|5")
    held["value"] = (lease_key, "node-a|5")
    await store.add(task)
    task.nodes["a"].status = NodeStatus.RUNNING
    await store.checkpoint(task)
    assert store.get("t-l") is task  # the live object, while the lease is ours
    client.set(lease_key, "node-b|6")  # the partition went to another node
    task.nodes["a"].status = NodeStatus.COMPLETED
    with pytest.raises(TaskFenced, match="no longer this node's"):
        await store.checkpoint(task)
    stored = redis_world.raw("t-l")
    assert stored["nodes"]["a"]["status"] == "running" and stored["revision"] == 2
    assert task.revision == 2  # the refused write did not count
    held["value"] = None
    assert store.get("t-l") is not task  # not ours any more: read from Redis


async def test_a_stale_copy_cannot_overwrite_a_newer_checkpoint(redis_world: TaskWorld) -> None:
    first, second = redis_world.store(), redis_world.store()
    assert isinstance(first, RedisTaskStore)
    await first.add(TaskState("t-r", "raced", graph(), provider="local", chat_id="c"))
    copy = require(second, "t-r")
    mine = require(first, "t-r")
    mine.title = "newer"
    await first.checkpoint(mine)
    copy.title = "stale"
    with pytest.raises(TaskFenced, match="written elsewhere"):
        await second.checkpoint(copy)
    assert redis_world.raw("t-r")["title"] == "newer"
