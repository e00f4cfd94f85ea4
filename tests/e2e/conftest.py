from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, daemon_factory
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAIThread]:
    """One fake model per test module (the platform tests reset its script per daemon)."""
    with FakeOpenAIThread() as fake:
        yield fake


@pytest.fixture
def make_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Callable[..., Daemon]]:
    """Build (not start) daemons on a fresh workspace wired to the fake model."""
    with daemon_factory(tmp_path, fake_llm.base_url) as factory:
        yield factory
