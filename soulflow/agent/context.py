"""Build the messages a provider sees: system prompt from the workspace, then history.

The system prompt comes from files the user edits (templates, agent roles, memory, skills,
decisions), so changing the agent's behaviour never needs a restart or code. Its order is
fixed, from the most general to the most specific:

1. `templates/*.md` (sorted by name): who the agent is, who it helps;
2. `agents/*.md`: agent roles, each under a heading with its name;
3. `memory/MEMORY.md`, then today's `memory/YYYY-MM-DD.md` (its newest
   `DAILY_NOTES_PROMPT_BYTES`);
4. the skills index: one line per `skills/<name>/SKILL.md` (read in full with the `skill`
   tool);
5. the decisions in force.

Then come the session's recent turns, a note with the thread's recent messages when the
input was written in a thread, and the input itself. A token budget keeps the whole request
bounded: the oldest turns go first, and the system prompt and the input are never cut.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from soulflow.agent.memory import MemoryStore
from soulflow.agent.skills import SkillIndex, one_line, parse_front_matter
from soulflow.agent.tokens import estimate_message_tokens
from soulflow.decision.service import DecisionService
from soulflow.session.store import Sessions

log = logging.getLogger(__name__)

PROMPT_RECHECK_S = 1.0
DEFAULT_MAX_CONTEXT_TOKENS = 16_000
# Today's note gets one summary per consolidation, so a busy day's note grows without bound;
# the prompt carries its newest paragraphs up to this size (about 4,000 tokens). Unbounded,
# every request grew with the day: a soak measured 180 KB prompts after 6 minutes, a steady
# RSS and CPU climb (issue 13). The whole note stays on disk; the prompt names the file.
DAILY_NOTES_PROMPT_BYTES = 16_000
# Session files also hold records that are not chat turns (consolidation markers, with a
# `_type`); read a few extra so they do not shorten the history the model gets.
_NON_TURN_SLACK = 8
THREAD_NOTE_HEADER = (
    "# Thread context\n\nThe input below was written in a thread. These are the thread's "
    "recent messages, oldest first, for context only:")


def _read_markdown(path: Path) -> str:
    """A file's text, or "" when it cannot be read (one bad file must not empty the prompt)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        log.warning("cannot read %s for the system prompt: %s", path, exc)
        return ""


def agent_role_section(path: Path) -> str:
    """One `agents/<name>.md` file as a prompt section: `## name`, its description, its body."""
    fields, body = parse_front_matter(_read_markdown(path))
    body = body.strip()
    name = one_line(fields.get("name", ""), 80) or path.stem
    description = one_line(fields.get("description", ""))
    if not body and not description:
        return ""
    lines = [f"## {name}"]
    if description:
        lines.append(f"_{description}_")
    if body:
        lines.append(body)
    return "\n\n".join(lines)


def thread_note(thread_context: Sequence[str] | None) -> dict[str, Any] | None:
    """The thread's recent messages as a system note placed just before the input."""
    items = [str(item).strip() for item in thread_context or () if str(item).strip()]
    if not items:
        return None
    lines = "\n".join("- " + item.replace("\n", "\n  ") for item in items)
    return {"role": "system", "content": f"{THREAD_NOTE_HEADER}\n\n{lines}"}


class ContextBuilder:
    """System prompt (re-read at most once a second), history and the token budget.

    `max_context_tokens` bounds system prompt + history + thread note + input, estimated
    with `soulflow.agent.tokens`; 0 or less disables the budget.
    """

    def __init__(self, workspace: Path, memory: MemoryStore, decisions: DecisionService,
                 sessions: Sessions, *, history_messages: int = 20,
                 clock: Callable[[], float] = time.monotonic,
                 max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
                 skills: SkillIndex | None = None) -> None:
        self.workspace = workspace
        self.memory = memory
        self.decisions = decisions
        self.sessions = sessions
        self.history_messages = history_messages
        self.max_context_tokens = max_context_tokens
        self.skills = skills if skills is not None else SkillIndex(workspace, clock=clock)
        self._clock = clock
        self._prompt = ""
        self._prompt_checked_at = float("-inf")
        self._warned_over_budget = False

    # -- system prompt -------------------------------------------------------------------

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
            parts.extend(_read_markdown(path) for path in sorted(templates.glob("*.md")))
        roles = self._agent_roles()
        if roles:
            parts.append(f"# Agent roles\n\n{roles}")
        long_term = self.memory.read_long_term().strip()
        if long_term:
            parts.append(f"# Long-term memory\n\n{long_term}")
        daily, older = self.memory.read_daily_tail(DAILY_NOTES_PROMPT_BYTES)
        if daily.strip():
            path = self.memory.daily_path()
            where = path.relative_to(self.workspace).as_posix() \
                if path.is_relative_to(self.workspace) else path.name
            earlier = f"(Earlier notes from today are in {where}.)\n\n" if older else ""
            parts.append(f"# Today's notes\n\n{earlier}{daily.strip()}")
        parts.append(self.skills.prompt_section())
        decisions = self.decisions.compact_text()
        if decisions:
            parts.append(f"# Decisions in force\n\n{decisions}")
        return "\n\n".join(part for part in parts if part)

    def _agent_roles(self) -> str:
        agents = self.workspace / "agents"
        if not agents.is_dir():
            return ""
        sections = (agent_role_section(path) for path in sorted(agents.glob("*.md")))
        return "\n\n".join(section for section in sections if section)

    # -- history -------------------------------------------------------------------------

    def history(self, session_key: str, user_text: str,
                thread_context: list[str] | None = None) -> list[dict[str, Any]]:
        """What goes between the system prompt and the input: the session's last N turns
        (minus the current input if already recorded) and the thread note, within budget."""
        turns = self._recent_turns(session_key, user_text)
        return self._fit(session_key, turns, thread_context, user_text)

    def build(self, session_key: str, user_text: str,
              thread_context: list[str] | None = None) -> list[dict[str, Any]]:
        """System prompt, the session's recent turns, the thread note, then the input."""
        system = self.system_prompt()
        head = [{"role": "system", "content": system}] if system else []
        return [*head, *self.history(session_key, user_text, thread_context),
                {"role": "user", "content": user_text}]

    def _recent_turns(self, session_key: str, user_text: str) -> list[dict[str, Any]]:
        if self.history_messages <= 0:
            return []
        records = self.sessions.last(session_key, self.history_messages + 1 + _NON_TURN_SLACK)
        records = [r for r in records if "_type" not in r]  # markers are not conversation
        last = records[-1] if records else {}
        if last.get("role") == "user" and last.get("content") == user_text:
            records = records[:-1]  # the current turn, already recorded in the session
        turns: list[dict[str, Any]] = []
        for record in records[-self.history_messages:]:
            role, content = record.get("role"), record.get("content")
            if role in ("user", "assistant") and isinstance(content, str):
                turns.append({"role": role, "content": content})
        return turns

    # -- budget --------------------------------------------------------------------------

    def _fit(self, session_key: str, turns: list[dict[str, Any]],
             thread_context: list[str] | None, user_text: str) -> list[dict[str, Any]]:
        """Trim to the budget: the thread note (oldest thread messages first), then history
        (oldest turns first). The system prompt and the input are never cut."""
        note = thread_note(thread_context)
        if self.max_context_tokens <= 0:
            return [*turns, note] if note else turns
        system = self.system_prompt()
        fixed = estimate_message_tokens({"role": "user", "content": user_text})
        if system:
            fixed += estimate_message_tokens({"role": "system", "content": system})
        available = self.max_context_tokens - fixed
        if available < 0:
            if not self._warned_over_budget:
                self._warned_over_budget = True
                log.warning("system prompt + input alone (~%d tokens) exceed the context budget "
                            "of %d tokens; sending them without history (session %s)",
                            fixed, self.max_context_tokens, session_key)
            return []
        if note is not None:
            note = self._fit_thread_note(thread_context or [], available)
            if note is not None:
                available -= estimate_message_tokens(note)
        kept: list[dict[str, Any]] = []
        for turn in reversed(turns):
            cost = estimate_message_tokens(turn)
            if cost > available:
                break
            kept.append(turn)
            available -= cost
        kept.reverse()
        if len(kept) < len(turns):
            if kept and kept[0]["role"] == "assistant":
                kept = kept[1:]  # start on a user turn, as strict chat templates expect
            log.debug("context budget: dropped %d of %d history turns of %s",
                      len(turns) - len(kept), len(turns), session_key)
        return [*kept, note] if note is not None else kept

    @staticmethod
    def _fit_thread_note(items: list[str], available: int) -> dict[str, Any] | None:
        """The note with as many of the thread's newest messages as fit, or None."""
        for start in range(len(items)):
            note = thread_note(items[start:])
            if note is None:
                return None
            if estimate_message_tokens(note) <= available:
                return note
        return None
