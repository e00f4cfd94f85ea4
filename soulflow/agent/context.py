"""Build the messages a provider sees: system prompt from the workspace, then history.

The system prompt comes from files the user edits (templates, agent roles, memory, skills,
decisions), so changing the agent's behaviour never needs a restart or code. Its order is
fixed, from the most general to the most specific:

1. `templates/*.md` (sorted by name): who the agent is, who it helps;
2. `agents/*.md`: agent roles, each under a heading with its name;
3. global memory: `memory/MEMORY.md`, then today's `memory/YYYY-MM-DD.md` (its newest
   `DAILY_NOTES_PROMPT_BYTES`) — the operator's, the same in every chat;
4. the skills index: one line per `skills/<name>/SKILL.md` (read in full with the `skill`
   tool);
5. the decisions in force;
6. the run's chat zone (`soulflow.security.zones`): that chat's `memory/MEMORY.md`, its
   today's note (newest `DAILY_NOTES_PROMPT_BYTES`) and a short "Your folder" section. Zones
   are per chat, so one chat's memory is never in another chat's prompt (a DM's never in a
   group's), and the heartbeat and quiet cron jobs have zones of their own.

Parts 1-5 are re-read at most once a second, as one cached text; part 6 the same way per
zone, in a small cache that only keeps zones read within the last second (at most
`CHAT_PROMPT_CACHE` of them). Every file is opened beneath the workspace without following
links (`soulflow.storage.beneath`): a template, role, skill or memory file that is a link is
refused and logged, never read, so a planted link cannot put a host file or the vault key
into a request.

Then come the session's recent turns, a note with the thread's recent messages when the
input was written in a thread, and the input itself. A token budget keeps the whole request
bounded: the oldest turns go first, and the system prompt and the input are never cut.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from soulflow.agent.memory import MemoryStore, RefusalLog
from soulflow.agent.skills import SkillIndex, one_line, parse_front_matter
from soulflow.agent.tokens import estimate_message_tokens
from soulflow.backends.base import SessionStore
from soulflow.contracts import ChatRef
from soulflow.decision.service import DecisionService
from soulflow.security.zones import ChatZone, zone_for
from soulflow.storage.beneath import Beneath

log = logging.getLogger(__name__)

PROMPT_RECHECK_S = 1.0
DEFAULT_MAX_CONTEXT_TOKENS = 16_000
# Today's note gets one summary per consolidation, so a busy day's note grows without bound;
# the prompt carries its newest paragraphs up to this size (about 4,000 tokens). Unbounded,
# every request grew with the day: a soak measured 180 KB prompts after 6 minutes, a steady
# RSS and CPU climb (issue 13). The whole note stays on disk; the prompt names the file.
DAILY_NOTES_PROMPT_BYTES = 16_000
# Chat zones whose prompt part is cached: only those read within the last PROMPT_RECHECK_S
# are kept (an older entry would be re-read anyway), and never more than this many.
CHAT_PROMPT_CACHE = 256
TEMPLATES_DIR = "templates"
AGENTS_DIR = "agents"
# Session files also hold records that are not chat turns (consolidation markers, with a
# `_type`); read a few extra so they do not shorten the history the model gets.
_NON_TURN_SLACK = 8
THREAD_NOTE_HEADER = (
    "# Thread context\n\nThe input below was written in a thread. These are the thread's "
    "recent messages, oldest first, for context only:")

Scope = ChatRef | ChatZone | None
"""Whose prompt: a run's chat (its zone is `zone_for(chat)`), a zone, or None (global only)."""


def zone_of(scope: Scope) -> ChatZone | None:
    """The chat zone a prompt is built for; None for no chat (the global part only)."""
    if scope is None or isinstance(scope, ChatZone):
        return scope
    if not scope.provider and not scope.chat_id:
        return None  # a record without a chat (an old run): no chat memory to load
    return zone_for(scope)


def folder_section(zone: ChatZone) -> str:
    """What the model is told about its own folder and the rest of the workspace."""
    folder = f"{zone.rel.as_posix()}/"
    return (
        "# Your folder\n\n"
        f"Your folder here is `{folder}` (paths are relative to the workspace). Write the "
        "files you create there.\n"
        f"- `{zone.files_rel.as_posix()}/` holds the files people sent in this chat.\n"
        f"- `{zone.memory_rel.as_posix()}/MEMORY.md` is this chat's long-term memory.\n"
        f"Everything outside `{folder}` belongs to the operator: you may read it, but "
        "changing it needs an admin's approval.")


def agent_role_section(name_stem: str, text: str) -> str:
    """One `agents/<name>.md` file as a prompt section: `## name`, its description, its body."""
    fields, body = parse_front_matter(text.strip())
    body = body.strip()
    name = one_line(fields.get("name", ""), 80) or name_stem
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


@dataclass(slots=True)
class _ChatPart:
    """One zone's cached prompt part and when it was read (the clock's time)."""

    checked_at: float
    text: str


class ContextBuilder:
    """System prompt (re-read at most once a second), history and the token budget.

    `max_context_tokens` bounds system prompt + history + thread note + input, estimated
    with `soulflow.agent.tokens`; 0 or less disables the budget. Pass the run's chat (or
    its zone) to `system_prompt`, `history` and `build`: without one the prompt holds the
    global part only, never a chat's memory.
    """

    def __init__(self, workspace: Path, memory: MemoryStore, decisions: DecisionService,
                 sessions: SessionStore, *, history_messages: int = 20,
                 clock: Callable[[], float] = time.monotonic,
                 max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
                 skills: SkillIndex | None = None,
                 chat_cache_size: int = CHAT_PROMPT_CACHE) -> None:
        self.workspace = workspace
        self.files: Beneath = memory.beneath
        self.memory = memory
        self.decisions = decisions
        self.sessions = sessions
        self.history_messages = history_messages
        self.max_context_tokens = max_context_tokens
        self.skills = skills if skills is not None else SkillIndex(workspace, clock=clock,
                                                                   files=self.files)
        self._clock = clock
        self._prompt = ""
        self._prompt_checked_at = float("-inf")
        self._chat_parts: OrderedDict[str, _ChatPart] = OrderedDict()
        self._chat_cache_size = max(1, chat_cache_size)
        self._refusals = RefusalLog()
        self._warned_over_budget = False

    # -- system prompt -------------------------------------------------------------------

    def system_prompt(self, chat: Scope = None) -> str:
        """The prompt for a run of `chat`: the global part and the chat zone's part, each
        re-read from disk at most once a second (edits apply within 1 s)."""
        now = self._clock()
        if now - self._prompt_checked_at >= PROMPT_RECHECK_S:
            self._prompt = self._read_global_prompt()
            self._prompt_checked_at = now
        zone = zone_of(chat)
        if zone is None:
            return self._prompt
        part = self._chat_part(zone, now)
        return f"{self._prompt}\n\n{part}" if self._prompt else part

    def cached_zones(self) -> int:
        """How many chat zones' parts are held right now (for status and benchmarks)."""
        return len(self._chat_parts)

    def _chat_part(self, zone: ChatZone, now: float) -> str:
        entry = self._chat_parts.get(zone.name)
        if entry is not None and now - entry.checked_at < PROMPT_RECHECK_S:
            return entry.text
        text = self._read_chat_part(zone)
        self._chat_parts.pop(zone.name, None)
        self._chat_parts[zone.name] = _ChatPart(now, text)  # newest read last
        while self._chat_parts:  # drop what is stale anyway, and what is over the cap
            _name, oldest = next(iter(self._chat_parts.items()))
            if now - oldest.checked_at < PROMPT_RECHECK_S and \
                    len(self._chat_parts) <= self._chat_cache_size:
                break
            self._chat_parts.popitem(last=False)
        return text

    def _read_global_prompt(self) -> str:
        parts: list[str] = [self._read_markdown(rel)
                            for rel in self._markdown_files(TEMPLATES_DIR)]
        roles = self._agent_roles()
        if roles:
            parts.append(f"# Agent roles\n\n{roles}")
        parts.extend(_memory_sections(self.memory, "Long-term memory", "Today's notes"))
        parts.append(self.skills.prompt_section())
        decisions = self.decisions.compact_text()
        if decisions:
            parts.append(f"# Decisions in force\n\n{decisions}")
        return "\n\n".join(part for part in parts if part)

    def _read_chat_part(self, zone: ChatZone) -> str:
        memory = self.memory.for_zone(zone)
        parts = _memory_sections(memory, "This chat's long-term memory",
                                 "This chat's notes today")
        parts.append(folder_section(zone))
        return "\n\n".join(part for part in parts if part)

    def _markdown_files(self, folder: str) -> list[PurePosixPath]:
        """The folder's regular `*.md` files, sorted by name; a link is refused (logged)."""
        try:
            entries = self.files.list_dir(folder)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._refusals.refused(PurePosixPath(folder), exc)
            return []
        found = []
        for entry in entries:
            if not entry.name.endswith(".md"):
                continue
            rel = PurePosixPath(folder, entry.name)
            if entry.kind == "file":
                found.append(rel)
            elif entry.kind == "link":
                self._refusals.refused(rel, OSError(
                    f"{rel} is a symbolic link (workspace files are opened without "
                    "following links)"))
        return found

    def _read_markdown(self, rel: PurePosixPath) -> str:
        """A file's text, or "" when it cannot be read (one bad file must not empty the
        prompt); a link or non-regular file is refused and logged."""
        try:
            text = self.files.read_text(rel)
        except OSError as exc:
            self._refusals.refused(rel, exc)
            return ""
        self._refusals.fine(rel)
        return text.strip()

    def _agent_roles(self) -> str:
        sections = (agent_role_section(PurePosixPath(rel.name).stem, self._read_markdown(rel))
                    for rel in self._markdown_files(AGENTS_DIR))
        return "\n\n".join(section for section in sections if section)

    # -- history -------------------------------------------------------------------------

    def history(self, session_key: str, user_text: str,
                thread_context: list[str] | None = None, *,
                chat: Scope = None) -> list[dict[str, Any]]:
        """What goes between the system prompt and the input: the session's last N turns
        (minus the current input if already recorded) and the thread note, within budget
        (the budget counts `chat`'s system prompt)."""
        turns = self._recent_turns(session_key, user_text)
        return self._fit(session_key, turns, thread_context, user_text, chat)

    def build(self, session_key: str, user_text: str,
              thread_context: list[str] | None = None, *,
              chat: Scope = None) -> list[dict[str, Any]]:
        """System prompt, the session's recent turns, the thread note, then the input."""
        system = self.system_prompt(chat)
        head = [{"role": "system", "content": system}] if system else []
        return [*head, *self.history(session_key, user_text, thread_context, chat=chat),
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
             thread_context: list[str] | None, user_text: str,
             chat: Scope) -> list[dict[str, Any]]:
        """Trim to the budget: the thread note (oldest thread messages first), then history
        (oldest turns first). The system prompt and the input are never cut."""
        note = thread_note(thread_context)
        if self.max_context_tokens <= 0:
            return [*turns, note] if note else turns
        system = self.system_prompt(chat)
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


def _memory_sections(memory: MemoryStore, long_title: str, daily_title: str) -> list[str]:
    """A memory folder's MEMORY.md and the newest part of today's note, as prompt sections."""
    parts = []
    long_term = memory.read_long_term().strip()
    if long_term:
        parts.append(f"# {long_title}\n\n{long_term}")
    daily, older = memory.read_daily_tail(DAILY_NOTES_PROMPT_BYTES)
    if daily.strip():
        where = memory.daily_rel().as_posix()
        earlier = f"(Earlier notes from today are in {where}.)\n\n" if older else ""
        parts.append(f"# {daily_title}\n\n{earlier}{daily.strip()}")
    return parts
