"""ContextBuilder: prompt assembly order, agents and skills, budget trimming, thread context."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from soulflow.agent.context import THREAD_NOTE_HEADER, ContextBuilder
from soulflow.agent.memory import MemoryStore
from soulflow.agent.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    estimate_message_tokens,
    estimate_messages_tokens,
    estimate_tokens,
)
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath

TODAY = dt.date(2026, 3, 14)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def builder(tmp_path: Path, **options: object) -> ContextBuilder:
    memory = MemoryStore(Beneath(tmp_path), today=lambda: TODAY)
    decisions = DecisionService(FileDecisionStore(tmp_path / "decisions.json"))
    return ContextBuilder(tmp_path, memory, decisions,
                          FileSessionStore(tmp_path / "sessions"), **options)  # type: ignore[arg-type]


def full_workspace(tmp_path: Path) -> ContextBuilder:
    write(tmp_path / "templates" / "B.md", "TEMPLATE-B")
    write(tmp_path / "templates" / "A.md", "TEMPLATE-A")
    write(tmp_path / "templates" / "notes.txt", "NOT-MARKDOWN")
    write(tmp_path / "agents" / "reviewer.md",
          "---\nname: Code reviewer\ndescription: Reviews pull requests\n---\nREVIEWER-BODY")
    write(tmp_path / "agents" / "planner.md", "PLANNER-BODY")
    write(tmp_path / "memory" / "MEMORY.md", "LONG-TERM")
    write(tmp_path / "memory" / "2026-03-14.md", "TODAY-NOTE")
    write(tmp_path / "memory" / "2026-03-13.md", "YESTERDAY-NOTE")
    write(tmp_path / "skills" / "deploy" / "SKILL.md",
          "---\nname: deploy\ndescription: Ship a release to production\n---\n# Deploy\n"
          "SKILL-BODY-SECRET-STEPS")
    context = builder(tmp_path)
    context.decisions.set("reply language", "Korean")
    return context


def test_prompt_order_and_content(tmp_path: Path) -> None:
    prompt = full_workspace(tmp_path).system_prompt()
    markers = ["TEMPLATE-A", "TEMPLATE-B", "# Agent roles", "LONG-TERM", "TODAY-NOTE",
               "# Skills", "# Decisions in force"]
    positions = [prompt.index(marker) for marker in markers]
    assert positions == sorted(positions)
    assert "NOT-MARKDOWN" not in prompt and "YESTERDAY-NOTE" not in prompt
    assert "- reply_language: Korean" in prompt


def test_agent_roles_use_front_matter_or_file_name(tmp_path: Path) -> None:
    prompt = full_workspace(tmp_path).system_prompt()
    assert "## Code reviewer\n\n_Reviews pull requests_\n\nREVIEWER-BODY" in prompt
    assert "## planner\n\nPLANNER-BODY" in prompt
    assert prompt.index("## planner") < prompt.index("## Code reviewer")  # sorted by file
    assert "name: Code reviewer" not in prompt  # front matter is not pasted


def test_skills_index_has_summaries_only(tmp_path: Path) -> None:
    prompt = full_workspace(tmp_path).system_prompt()
    assert "- **deploy**: Ship a release to production" in prompt
    assert "`skill` tool" in prompt
    assert "SKILL-BODY-SECRET-STEPS" not in prompt


def test_empty_workspace_gives_empty_prompt(tmp_path: Path) -> None:
    context = builder(tmp_path)
    assert context.system_prompt() == ""
    assert context.build("s", "hi") == [{"role": "user", "content": "hi"}]


def test_prompt_is_rechecked_at_most_once_a_second(tmp_path: Path) -> None:
    clock = Clock()
    context = builder(tmp_path, clock=clock)
    write(tmp_path / "templates" / "A.md", "first")
    assert context.system_prompt() == "first"
    write(tmp_path / "templates" / "A.md", "second")
    write(tmp_path / "skills" / "new" / "SKILL.md", "A new skill.")
    clock.now += 0.5
    assert context.system_prompt() == "first"
    clock.now += 0.6
    prompt = context.system_prompt()
    assert prompt.startswith("second") and "- **new**: A new skill." in prompt


def test_history_skips_current_input_and_typed_records(tmp_path: Path) -> None:
    context = builder(tmp_path, history_messages=3)
    sessions = context.sessions
    for i in range(4):
        sessions.append("s", {"role": "user", "content": f"q{i}"})
        sessions.append("s", {"role": "assistant", "content": f"a{i}"})
    sessions.append("s", {"_type": "consolidated", "through": 5, "count": 8})
    sessions.append("s", {"role": "user", "content": "now"})
    history = context.history("s", "now")
    assert history == [{"role": "assistant", "content": "a2"},
                       {"role": "user", "content": "q3"},
                       {"role": "assistant", "content": "a3"}]
    assert all("_type" not in m for m in context.build("s", "now"))


def test_thread_context_is_a_note_just_before_the_input(tmp_path: Path) -> None:
    context = builder(tmp_path)
    context.sessions.append("s", {"role": "user", "content": "earlier"})
    context.sessions.append("s", {"role": "assistant", "content": "reply"})
    messages = context.build("s", "what do you think?",
                             thread_context=["alice: ship it friday", "bob: line1\nline2", " "])
    assert [m["role"] for m in messages] == ["user", "assistant", "system", "user"]
    note = messages[-2]["content"]
    assert note.startswith(THREAD_NOTE_HEADER)
    assert "- alice: ship it friday\n- bob: line1\n  line2" in note
    assert messages[-1] == {"role": "user", "content": "what do you think?"}
    assert context.history("s", "x", thread_context=[]) == context.history("s", "x")


def test_token_estimates() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    message = {"role": "user", "content": "x" * 40}
    assert estimate_message_tokens(message) == 10 + MESSAGE_OVERHEAD_TOKENS
    with_calls = {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "1", "name": "skill", "arguments": {"name": "x"}}]}
    assert estimate_message_tokens(with_calls) > MESSAGE_OVERHEAD_TOKENS
    assert estimate_messages_tokens([message, message]) == 2 * (10 + MESSAGE_OVERHEAD_TOKENS)


def fill_session(context: ContextBuilder, turns: int, size: int = 400) -> None:
    for i in range(turns):
        context.sessions.append("s", {"role": "user", "content": f"q{i} " + "u" * size})
        context.sessions.append("s", {"role": "assistant", "content": f"a{i} " + "a" * size})


def test_budget_drops_oldest_turns_and_keeps_the_system_prompt(tmp_path: Path) -> None:
    write(tmp_path / "templates" / "A.md", "S" * 2000)  # ~500 tokens
    context = builder(tmp_path, history_messages=40, max_context_tokens=1500)
    fill_session(context, 10)  # 20 messages of ~105 tokens each
    messages = context.build("s", "hello")
    assert messages[0] == {"role": "system", "content": "S" * 2000}
    assert messages[-1] == {"role": "user", "content": "hello"}
    assert estimate_messages_tokens(messages) <= 1500
    history = messages[1:-1]
    assert 0 < len(history) < 20
    assert history[-1]["content"].startswith("a9")  # the newest turns survive
    assert history[0]["role"] == "user"  # and it starts on a user turn
    unlimited = builder(tmp_path, history_messages=40, max_context_tokens=0)
    assert len(unlimited.history("s", "hello")) == 20


def test_budget_trims_thread_context_oldest_first(tmp_path: Path) -> None:
    context = builder(tmp_path, max_context_tokens=200)
    fill_session(context, 3)
    thread = [f"m{i}: " + "t" * 100 for i in range(10)]
    messages = context.build("s", "hi", thread_context=thread)
    note = messages[-2]["content"]
    assert "m9:" in note and "m0:" not in note
    assert estimate_messages_tokens(messages) <= 200


def test_oversized_system_prompt_drops_all_history_and_warns_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "templates" / "A.md", "S" * 8000)  # ~2000 tokens
    context = builder(tmp_path, max_context_tokens=1000)
    fill_session(context, 3)
    with caplog.at_level(logging.WARNING, logger="soulflow.agent.context"):
        first = context.build("s", "hi", thread_context=["a thread message"])
        second = context.build("s", "hi again")
    assert first == [{"role": "system", "content": "S" * 8000},
                     {"role": "user", "content": "hi"}]
    assert len(second) == 2 and second[0]["content"] == "S" * 8000
    assert len([r for r in caplog.records if "exceed the context budget" in r.message]) == 1
