from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAIThread]:
    """One fake model per test module (the platform tests reset its script per daemon)."""
    with FakeOpenAIThread() as fake:
        yield fake


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIThread]:
    with FakeOpenAIThread() as fake:
        yield fake


@pytest.fixture
def make_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator:  # type: ignore[type-arg]
    """Build (not start) daemons on a fresh workspace wired to the fake model."""
    daemons: list[Daemon] = []

    def factory(**env: str) -> Daemon:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        settings = {"PROVIDER": "phi4_local", "PHI4_BASE_URL": fake_llm.base_url,
                    "PHI4_MODEL": "fake-model", **env}
        daemon = Daemon(workspace, base_env(workspace, **settings),
                        tmp_path / f"daemon-{len(daemons)}.log")
        daemons.append(daemon)
        return daemon

    yield factory
    for daemon in daemons:
        daemon.close()
