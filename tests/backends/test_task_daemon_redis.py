"""`soulflow run` with SOULFLOW_BACKEND=redis and task graphs: a daemon SIGKILLed in the middle
of a task's agent step, and the next daemon (a new node) finishing the task; /task answers from
the tasks in Redis, cancelling writes the workflow event to the shared stream (the dashboard
lists it) and the story to the task's Redis list; and tasks a dead node left mid-flight resume
on the daemon that takes their chat, by the rules of a restart (an idempotent step runs again,
the other waits for the user, who answers in the chat)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from soulflow.backends.redis.events import RedisWorkflowLog
from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.tasks import RedisTaskStore
from soulflow.tasks import (
    NodeKind,
    NodeStatus,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
)
from soulflow.tasks.answers import require
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, daemon_factory, wait_for
from tests.fakes.openai_api import FakeOpenAIThread
from tests.tasks.helpers import waiting_task

NODE = "node-t"
LOCAL_CHAT = f"test@{NODE}"  # the daemon's local chat "test", as the node names it on Redis


class Shared:
    """The tasks' side of Redis, read and written as a node that already died would have."""

    def __init__(self, url: str) -> None:
        self.prefix = f"d{uuid.uuid4().hex[:8]}:"
        self.state = StateRedis(sync_client(url, timeout_s=2.0), self.prefix)
        self.keys = TaskKeys(self.prefix)

    def store(self) -> RedisTaskStore:
        return RedisTaskStore(self.state, self.keys)  # unfenced: a fresh reader each time

    def plant(self, *tasks: TaskState) -> None:
        store = self.store()
        for task in tasks:
            asyncio.run(store.add(task))

    def task(self, task_id: str) -> TaskState:
        return require(self.store(), task_id)


@pytest.fixture
def shared(redis_server: RedisServer) -> Iterator[Shared]:
    found = Shared(redis_server.url)
    yield found
    found.state.close()


@pytest.fixture
def daemon(tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer,
           shared: Shared) -> Iterator[Daemon]:
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": shared.prefix, "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "1", "SOULFLOW_NODE_ID": NODE}
    with daemon_factory(tmp_path, fake_llm.base_url, **settings) as factory:
        yield factory()


def test_a_task_whose_daemon_is_killed_mid_step_finishes_on_the_next(
        daemon: Daemon, shared: Shared, fake_llm: FakeOpenAIThread) -> None:
    shared.plant(TaskState("t-long", "Think it over", TaskGraph([
        TaskNode(id="think", kind=NodeKind.AGENT, goal="think it over"),
        TaskNode(id="again", kind=NodeKind.AGENT, goal="and once more", depends_on=["think"])]),
        provider="local", chat_id=LOCAL_CHAT, requested_by="local"))
    fake_llm.delay_s = 30.0  # the first step's model call is under way at the kill
    daemon.start()  # the only node: it holds every chat and starts the task
    wait_for(lambda: shared.task("t-long").nodes["think"].status is NodeStatus.RUNNING
             and fake_llm.requests, what="the first step under way")
    daemon.kill()
    fake_llm.delay_s = 0.0
    daemon.start()  # the same node again: it takes its local chat back (its private
    # partition), the task with it
    wait_for(lambda: shared.task("t-long").status is TaskStatus.COMPLETED, timeout=30,
             what="the task to finish on the new node")
    done = shared.task("t-long")
    assert done.nodes["think"].attempts == 2 and done.nodes["again"].attempts == 1
    wait_for(lambda: any(r["content"].startswith("✅ Task t-long") for r in daemon.replies()),
             what="the result in the chat")
    assert [r["content"].startswith("✅ Task t-long") for r in daemon.replies()].count(True) == 1
    assert daemon.stop() == 0


def test_task_commands_and_events_on_redis(daemon: Daemon, shared: Shared) -> None:
    send = TaskNode(id="send", kind=NodeKind.TOOL, tool="message", depends_on=["ok"])
    shared.plant(waiting_task("t-wait", LOCAL_CHAT, send))
    daemon.start()
    assert daemon.state()["task_graphs"] == {"unfinished": 1, "problems": [], "running": 0}
    listed = daemon.wait_reply(daemon.say("/task list"))["content"]
    assert listed == ("Tasks in this chat:\n"
                      "• t-wait waiting_approval: Mail the vendors (1/3 steps done)")
    cancelled = daemon.wait_reply(daemon.say("/task cancel t-wait"))["content"]
    assert cancelled == "Task t-wait is cancelled."
    assert shared.task("t-wait").status is TaskStatus.CANCELLED
    shown = daemon.state()["workflow_events"]  # from the stream every node writes
    assert [e["data"]["task_id"] for e in shown] == ["t-wait"]
    assert daemon.stop() == 0

    [event] = RedisWorkflowLog(shared.state, shared.keys).recent(10)
    assert event["phase"] == "done" and event["payload"]["status"] == "cancelled"
    assert event["detail_file"] == f"redis:{shared.keys.task_details('t-wait')}"
    [story] = shared.store().detail_tail("t-wait", 10)
    assert "**done**: task cancelled by" in story
    assert not (daemon.workspace / "runtime" / "tasks" / "store.json").exists()


def test_a_dead_node_s_tasks_resume_on_the_daemon_that_takes_their_chat(
        daemon: Daemon, shared: Shared) -> None:
    # as a node killed mid-step left them: each with its first step `running`
    redo = TaskState("t-redo", "Summarise", TaskGraph([
        TaskNode(id="think", kind=NodeKind.AGENT, goal="summarise the notes")]),
        provider="local", chat_id=LOCAL_CHAT, requested_by="local")
    ask = TaskState("t-ask", "Tell the chat", TaskGraph([
        TaskNode(id="tell", kind=NodeKind.TOOL, tool="message",
                 params={"text": "said by the task"})]),
        provider="local", chat_id=LOCAL_CHAT, requested_by="local")
    for task in (redo, ask):
        state = next(iter(task.nodes.values()))
        state.status, state.attempts = NodeStatus.RUNNING, 1
    shared.plant(redo, ask)

    daemon.start()
    # the agent step (no tools: idempotent) runs again here; the message step is not
    # repeated behind the user's back: it waits for an answer in the chat
    wait_for(lambda: shared.task("t-redo").status is TaskStatus.COMPLETED, timeout=30,
             what="the idempotent task to finish")
    wait_for(lambda: shared.task("t-ask").status is TaskStatus.WAITING_APPROVAL, timeout=30,
             what="the interrupted task to wait")
    assert shared.task("t-ask").nodes["tell"].status is NodeStatus.INTERRUPTED
    wait_for(lambda: any("t-ask (Tell the chat): step tell" in r["content"]
                         for r in daemon.replies()), what="the prompt in the chat")
    assert not any(r["content"] == "said by the task" for r in daemon.replies())

    answer = daemon.wait_reply(daemon.say("retry"))["content"]
    assert answer == "Task t-ask: step tell retrying."
    wait_for(lambda: shared.task("t-ask").status is TaskStatus.COMPLETED, timeout=30,
             what="the retried task to finish")
    wait_for(lambda: [r["content"] for r in daemon.replies()].count("said by the task") == 1,
             what="the step's message, once")
    assert daemon.stop() == 0
