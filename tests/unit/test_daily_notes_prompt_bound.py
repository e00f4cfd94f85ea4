"""Today's note in the system prompt is bounded: a day of consolidation summaries must not make
every request (and the daemon's memory) grow with it; the newest notes are the ones kept."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from soulflow.agent.context import DAILY_NOTES_PROMPT_BYTES, ContextBuilder
from soulflow.agent.memory import MemoryStore
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath

TODAY = dt.date(2026, 11, 24)


def builder(root: Path) -> tuple[ContextBuilder, MemoryStore]:
    memory = MemoryStore(Beneath(root), today=lambda: TODAY)
    ticks = iter(range(1_000_000))
    decisions = DecisionService(FileDecisionStore(root / "decisions.json"))
    context = ContextBuilder(root, memory, decisions, FileSessionStore(root / "sessions"),
                             clock=lambda: float(next(ticks)))
    return context, memory


def summary(i: int) -> str:
    return f"**Conversation summary** (note {i}): " + "é talked about the weather. " * 20


def test_a_long_day_of_notes_keeps_the_prompt_bounded_with_the_newest_notes(
        tmp_path: Path) -> None:
    context, memory = builder(tmp_path)
    sizes = []
    for i in range(600):  # ~370 KB of notes: a busy day
        memory.append_daily(summary(i))
        if i % 100 == 99:
            sizes.append(len(context.system_prompt().encode("utf-8")))
    prompt = context.system_prompt()
    assert len(memory.read_daily().encode("utf-8")) > 20 * DAILY_NOTES_PROMPT_BYTES
    assert max(sizes) <= DAILY_NOTES_PROMPT_BYTES + 200 and len(set(sizes)) <= 2
    assert "(note 599)" in prompt and "(note 0)" not in prompt
    assert "Earlier notes from today are in memory/2026-11-24.md" in prompt
    notes = prompt.split("# Today's notes\n\n", 1)[1]
    first = notes.split("\n\n")[1]
    assert first.startswith("**Conversation summary** (note ")  # whole paragraphs only
    assert "\ufffd" not in prompt  # a multi-byte character cut at the edge is dropped


def test_a_short_note_is_given_whole(tmp_path: Path) -> None:
    context, memory = builder(tmp_path)
    memory.append_daily(summary(1))
    prompt = context.system_prompt()
    assert "# Today's notes\n\n# 2026-11-24\n\n**Conversation summary** (note 1)" in prompt
    assert "Earlier notes" not in prompt
