"""Build the messages a provider sees: system prompt from the workspace, then history.

The system prompt comes from files the user edits (templates, memory, decisions), so changing
the agent's behaviour never needs a restart or code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.agent.memory import MemoryStore
from soulflow.decision.service import DecisionService
from soulflow.session.store import SessionStore

PROMPT_RECHECK_S = 1.0


class ContextBuilder:
    def __init__(self, workspace: Path, memory: MemoryStore, decisions: DecisionService,
                 sessions: SessionStore, *, history_messages: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workspace = workspace
        self.memory = memory
        self.decisions = decisions
        self.sessions = sessions
        self.history_messages = history_messages
        self._clock = clock
        self._prompt = ""
        self._prompt_checked_at = float("-inf")

    def system_prompt(self) -> str:
        """The prompt, re-read from disk at most once a second (edits apply within 1 s)."""
        now = self._clock()
        if now - self._prompt_checked_at >= PROMPT_RECHECK_S:
            self._prompt = self._read_system_prompt()
            self._prompt_checked_at = now
        return self._prompt

    def _read_system_prompt(self) -> str:
        parts: list[str] = []
        templates = self.workspace / "templates"
        if templates.is_dir():
            for path in sorted(templates.glob("*.md")):
                text = path.read_text(encoding="utf-8", errors="replace").strip()
                if text:
                    parts.append(text)
        long_term = self.memory.read_long_term().strip()
        if long_term:
            parts.append(f"# Long-term memory\n\n{long_term}")
        daily = self.memory.read_daily().strip()
        if daily:
            parts.append(f"# Today's notes\n\n{daily}")
        decisions = self.decisions.compact_text()
        if decisions:
            parts.append(f"# Decisions in force\n\n{decisions}")
        return "\n\n".join(parts)

    def history(self, session_key: str, user_text: str) -> list[dict[str, Any]]:
        """The last N turns of the session, minus the current input if already recorded."""
        records = self.sessions.last(session_key, self.history_messages + 1)
        last = records[-1] if records else {}
        if last.get("role") == "user" and last.get("content") == user_text:
            records = records[:-1]  # the current turn, already recorded in the session
        turns: list[dict[str, Any]] = []
        for record in records[-self.history_messages:] if self.history_messages else []:
            role, content = record.get("role"), record.get("content")
            if role in ("user", "assistant") and isinstance(content, str):
                turns.append({"role": role, "content": content})
        return turns

    def build(self, session_key: str, user_text: str) -> list[dict[str, Any]]:
        """System prompt, the session's recent turns, then the input."""
        system = self.system_prompt()
        head = [{"role": "system", "content": system}] if system else []
        return [*head, *self.history(session_key, user_text),
                {"role": "user", "content": user_text}]
