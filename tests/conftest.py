"""Fixtures every test directory may use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIThread]:
    """The fake OpenAI-compatible model in a thread of its own, for a daemon subprocess."""
    with FakeOpenAIThread() as fake:
        yield fake
