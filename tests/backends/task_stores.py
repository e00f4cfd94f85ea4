"""Task stores and workflow logs of either kind over one state, reopened as after a restart.

`TaskWorld("file", tmp_path)` keeps everything under `tmp_path/runtime`; `TaskWorld("redis",
tmp_path, url)` under a fresh key prefix on the session's private redis-server. `store()` and
`events()` build new objects over the same state each time (another process, or a restart).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.base import ProposalMap, TaskStore
from soulflow.backends.file.proposals import FileProposalMap
from soulflow.backends.file.tasks import STORE_VERSION, FileTaskStore
from soulflow.backends.file.workflow import FileWorkflowLog
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.events import RedisWorkflowLog
from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.proposals import RedisProposalMap
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.tasks import Fence, RedisTaskStore
from soulflow.events.hub import EventHub
from soulflow.events.workflow import WorkflowEventService
from soulflow.security.redact import Redactor


class TaskWorld:
    def __init__(self, kind: str, tmp_path: Path, redis_url: str = "") -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.runtime = tmp_path / "runtime"
        self.prefix = f"t{uuid.uuid4().hex[:10]}:"
        self.keys = TaskKeys(self.prefix)
        self._url = redis_url
        self._clients: list[StateRedis] = []
        self._async_clients: list[AsyncStoreRedis] = []

    def state(self) -> StateRedis:
        """A new synchronous client, as another node would have."""
        state = StateRedis(sync_client(self._url, timeout_s=2.0), self.prefix)
        self._clients.append(state)
        return state

    def store(self, *, fence: Fence | None = None) -> TaskStore:
        if self.kind == "file":
            return FileTaskStore(self.runtime / "tasks")
        return RedisTaskStore(self.state(), self.keys, fence=fence)

    def proposals(self) -> ProposalMap:
        if self.kind == "file":
            return FileProposalMap(self.runtime / "tasks" / "proposals.json")
        client = AsyncStoreRedis.from_url(self._url)  # offering and answering use it
        self._async_clients.append(client)
        return RedisProposalMap(self.keys, client=client)

    def events(self, *, secret: str = "", hub: EventHub | None = None) -> WorkflowEventService:
        redactor = Redactor([secret]) if secret else None
        if self.kind == "file":
            return WorkflowEventService(FileWorkflowLog(self.runtime / "events"),
                                        workspace=self.tmp_path, redactor=redactor, hub=hub)
        return WorkflowEventService(RedisWorkflowLog(self.state(), self.keys),
                                    workspace=self.tmp_path, redactor=redactor, hub=hub)

    # -- reaching under the store (setting up damage, checking bytes) -----------------------

    def plant(self, records: dict[str, Any]) -> None:
        """Stored task records as they are, bypassing the store (a bad one included)."""
        if self.kind == "file":
            path = self.runtime / "tasks" / "store.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"version": STORE_VERSION, "tasks": records}))
            return
        client = self.state().client
        for task_id, record in records.items():
            client.hset(self.keys.tasks, task_id, json.dumps(record))
            client.hset(self.keys.tasks_index, task_id, f"{record.get('revision', 0)}|x:y")
            client.zadd(self.keys.tasks_created, {task_id: record.get("created_at", 0)})
            client.sadd(self.keys.tasks_open, task_id)

    def raw(self, task_id: str) -> Any:
        """The stored record of one task, parsed (None if absent)."""
        if self.kind == "file":
            path = self.runtime / "tasks" / "store.json"
            return json.loads(path.read_text())["tasks"].get(task_id)
        raw = self.state().client.hget(self.keys.tasks, task_id)
        return None if raw is None else json.loads(raw)

    async def close(self) -> None:
        for state in self._clients:
            state.close()
        for client in self._async_clients:
            await client.aclose()


@pytest.fixture(params=["file", "redis"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskWorld]:
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else ""
    w = TaskWorld(request.param, tmp_path, url)
    yield w
    await w.close()


@pytest.fixture
async def redis_world(request: pytest.FixtureRequest,
                      tmp_path: Path) -> AsyncIterator[TaskWorld]:
    """Redis only: what the shared store has and the files do not (fencing, several nodes)."""
    w = TaskWorld("redis", tmp_path, request.getfixturevalue("redis_server").url)
    yield w
    await w.close()
