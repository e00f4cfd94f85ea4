"""A real `soulflow run` against the fake model, for the console's API tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, base_env
from tests.fakes.openai_api import FakeOpenAIThread

TOKEN = "console-test-token-9f8e7d6c5b4a"
#: a credential the daemon knows (its name looks secret): it must never leave the daemon
PLANTED = "planted-Secret-4242-zebra-quartz"


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIThread]:
    with FakeOpenAIThread() as fake:
        yield fake


@pytest.fixture
def make_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Callable[..., Daemon]]:
    """Build (not start) daemons on one workspace, wired to the fake model, with a token and
    the planted credential in their environment."""
    daemons: list[Daemon] = []

    def factory(**env: str) -> Daemon:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        settings = {"PROVIDER": "phi4_local", "PHI4_BASE_URL": fake_llm.base_url,
                    "PHI4_MODEL": "fake-model", "DASHBOARD_TOKEN": TOKEN,
                    "ACME_API_KEY": PLANTED, **env}
        daemon = Daemon(workspace, base_env(workspace, **settings),
                        tmp_path / f"daemon-{len(daemons)}.log")
        daemons.append(daemon)
        return daemon

    yield factory
    for daemon in daemons:
        daemon.close()
