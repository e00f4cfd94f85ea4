"""`agent_domain`: a real AgentDomain over files in a test's directory, answering with a local
model, for tests that put a Conversation in front of it (tests/unit/test_conversation.py and the
channel feedback rig)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath


def agent_domain(tmp_path: Path, model: Any, chat: ChatRef) -> AgentDomain:
    """SessionStore, memory, decisions and run threads under `tmp_path`; every turn asks `model`,
    no tools are registered, and a tool context points at `tmp_path` for `chat`."""
    sessions = FileSessionStore(tmp_path / "sessions")
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "d.json")), sessions)
    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: model, ToolRegistry(),
                     context.system_prompt,
                     lambda state, approved: ToolContext(tmp_path, chat))
    return AgentDomain(context, sessions, loop)
