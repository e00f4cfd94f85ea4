"""Shared fixtures: a fresh workspace per test and a context factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.security.vault import SecretVault
from tests.tools.listener import Listener
from tests.vaults import file_vault

MakeCtx = Callable[..., ToolContext]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def make_ctx(workspace: Path) -> MakeCtx:
    def make(
        *,
        approved: bool = False,
        vault: SecretVault | None = None,
        abort: asyncio.Event | None = None,
    ) -> ToolContext:
        chat = ChatRef(provider="local", chat_id="c1", sender_id="u1")
        return ToolContext(workspace, chat, vault=vault, approved=approved, abort=abort)

    return make


@pytest.fixture
def ctx(make_ctx: MakeCtx) -> ToolContext:
    return make_ctx()


@pytest.fixture
def vault(tmp_path: Path) -> SecretVault:
    return file_vault(tmp_path / "security")


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    """A loopback listener, stopped after the test (tests start it: they need the port)."""
    server = Listener()
    yield server
    await server.stop()
