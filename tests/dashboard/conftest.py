"""A real `soulflow run` against the fake model, for the console's API tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, daemon_factory
from tests.fakes.openai_api import FakeOpenAIThread

TOKEN = "console-test-token-9f8e7d6c5b4a"
#: a credential the daemon knows (its name looks secret): it must never leave the daemon
PLANTED = "planted-Secret-4242-zebra-quartz"


@pytest.fixture
def make_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Callable[..., Daemon]]:
    """Build (not start) daemons on one workspace, wired to the fake model, with a token and
    the planted credential in their environment."""
    with daemon_factory(tmp_path, fake_llm.base_url, DASHBOARD_TOKEN=TOKEN,
                        ACME_API_KEY=PLANTED) as factory:
        yield factory
