"""The agent's synchronous stores (sessions, run journals, approval prompts) over either backend,
for the contract tests: `stores` is parametrised over file and redis; `open_*` opens a store
again over the same state, as another daemon (redis) or a restarted one (file) would."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.run.timing import FinishedListener
from soulflow.backends.base import ApprovalMap, RunJournal, SessionStore
from soulflow.backends.file.approvals import FileApprovalMap
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.backends.redis.approvals import RedisApprovalMap
from soulflow.backends.redis.runs import Fence, RedisRunJournal, no_fence
from soulflow.backends.redis.sessions import RedisSessionStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client


def _ignore_finished(status: str, seconds: float, sub: bool) -> None:
    return None


@dataclass
class AgentStores:
    """Opens stores of one kind over one state: a directory, or a Redis key prefix."""

    kind: str
    tmp_path: Path
    state: StateRedis | None = None
    opened: list[Any] = field(default_factory=list)

    def sessions(self, *, redact: Callable[[str], str] | None = None) -> SessionStore:
        store: SessionStore
        if self.state is None:
            store = FileSessionStore(self.tmp_path / "sessions", fsync="always", redact=redact)
        else:
            store = RedisSessionStore(self.state, redact=redact)
        self.opened.append(store)
        return store

    def runs(self, *, redact: Callable[[Any], Any] | None = None,
             on_finished: FinishedListener = _ignore_finished,
             fence: Fence = no_fence) -> RunJournal:
        store: RunJournal
        if self.state is None:
            store = FileRunJournal(self.tmp_path / "threads", fsync="always", redact=redact,
                                     on_finished=on_finished)
        else:
            store = RedisRunJournal(self.state, redact=redact, on_finished=on_finished,
                                     fence=fence)
        self.opened.append(store)
        return store

    def approvals(self, name: str = "messages") -> ApprovalMap:
        if self.state is None:
            return FileApprovalMap(self.tmp_path / "approvals" / f"{name}.json")
        return RedisApprovalMap(self.state, name)

    def reopen_runs(self, store: RunJournal, **kwargs: Any) -> RunJournal:
        """The run store after a restart (file) or on another node (redis)."""
        store.close()
        return self.runs(**kwargs)

    def close(self) -> None:
        for store in self.opened:
            store.close()
        if self.state is not None:
            self.state.close()


@pytest.fixture(params=["file", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentStores]:
    state = None
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
        state = StateRedis(sync_client(url), f"t{uuid.uuid4().hex[:10]}:")
    opened = AgentStores(request.param, tmp_path, state)
    yield opened
    opened.close()


@pytest.fixture
def redis_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentStores]:
    url = request.getfixturevalue("redis_server").url
    opened = AgentStores("redis", tmp_path,
                         StateRedis(sync_client(url), f"t{uuid.uuid4().hex[:10]}:"))
    yield opened
    opened.close()
