"""Redis lost under a running task: the runner pauses without marking anything (the step's
outcome is not recorded, nothing is failed), and once Redis answers again the engine resumes the
task from its last checkpoint by the restart rules (an idempotent step runs again)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.tasks import RedisTaskStore
from soulflow.errors import StoreUnavailable
from soulflow.tasks import (
    NodeOutcome,
    NodeStatus,
    TaskEngine,
    TaskGraph,
    TaskStatus,
)
from soulflow.tasks.answers import require
from tests.backends.redis_server import RedisServer
from tests.tasks.helpers import Toolbox, tool
from tests.waiting import until


async def test_a_task_pauses_while_redis_is_away_and_resumes_after(
        durable_redis: RedisServer) -> None:
    state = StateRedis(sync_client(durable_redis.url, timeout_s=0.5), f"t{uuid.uuid4().hex[:8]}:")
    store = RedisTaskStore(state, TaskKeys(state.prefix))
    release = asyncio.Event()
    ran: list[str] = []

    async def step(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        ran.append(str(params["name"]))
        await release.wait()
        return NodeOutcome.ok(params["name"])

    engine = TaskEngine(store, Toolbox({"step": step}, idempotent={"step"}).executors())
    task = await engine.submit(TaskGraph([
        tool("one", "step", params={"name": "one"}),
        tool("two", "step", params={"name": "two"}, depends_on=["one"])]), title="t",
        provider="local", chat_id="c")
    await until(lambda: ran == ["one"])

    durable_redis.stop()  # Redis dies while step `one` runs
    release.set()  # the step ends; its checkpoint cannot be written
    await until(lambda: engine.running_ids() == [], timeout=5)
    assert task.status is TaskStatus.RUNNING  # paused, not failed
    with pytest.raises(StoreUnavailable):
        await engine.reconcile()  # the watch loop logs this and tries again later

    durable_redis.start()  # back, with everything it acknowledged (AOF always)
    stored = require(store, task.task_id)
    assert stored.nodes["one"].status is NodeStatus.RUNNING  # the last checkpoint
    assert await engine.reconcile() == [task.task_id]
    done = await engine.wait(task.task_id)
    assert done.status is TaskStatus.COMPLETED
    assert ran == ["one", "one", "two"]  # the idempotent step ran again, as after a restart
    assert require(store, task.task_id).status is TaskStatus.COMPLETED
    await engine.stop()
    state.close()
