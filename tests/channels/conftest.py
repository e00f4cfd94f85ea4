"""Fixtures shared by the channel tests.

`proxy` needs the test module's `fake` fixture to have a `port` (the Telegram and Slack
fakes); a module whose fake has none defines its own `proxy`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.channels.tcp_proxy import DroppingProxy
from tests.running import running


@pytest.fixture
async def proxy(fake: Any) -> AsyncIterator[DroppingProxy]:
    """A TCP proxy in front of the fake that the test can make drop connections."""
    async with running(DroppingProxy(fake.port)) as link:
        yield link
