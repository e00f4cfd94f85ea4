"""Scoped memory (issue 17, finding 1): a run's prompt holds global memory plus its own chat
zone's memory only, and consolidation writes into the chat's zone, never global memory.

Alice's DM, Bob's DM and a group on one platform go through a real `AgentDomain` (sessions,
run journal, loop) with the consolidator wired as the daemon wires it: what Alice said in her
DM comes back in her DM's system prompt, and in no request of Bob's, DM or group. The
heartbeat (a quiet turn) has a zone of its own.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import (
    CHAT_PROMPT_CACHE,
    DAILY_NOTES_PROMPT_BYTES,
    ContextBuilder,
    folder_section,
)
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.contracts import QUIET_TURN_ORIGIN, ChatRef, InboundMessage, ProviderResult
from soulflow.decision.service import DecisionService
from soulflow.security.zones import ChatZone, zone_for, zone_named
from soulflow.storage.beneath import Beneath

TODAY = dt.date(2026, 3, 14)
ALICE, BOB = "111", "222"
GROUP = "-1009"
MARK = "ALICE-TEAL-7731"
SUMMARY_REPLY = (f"SUMMARY:\nAlice said her favourite colour is teal ({MARK}).\n\n"
                 f"FACTS:\n- Alice's favourite colour is teal {MARK}")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def builder(root: Path, clock: Clock | None = None, **options: Any) -> ContextBuilder:
    memory = MemoryStore(Beneath(root), today=lambda: TODAY)
    return ContextBuilder(root, memory, DecisionService(FileDecisionStore(root / "decisions.json")),
                          FileSessionStore(root / "sessions"), clock=clock or Clock(), **options)


def dm(user: str) -> ChatRef:
    return ChatRef("telegram", user, sender_id=user, requester_id=user,
                   session_key=f"telegram:{user}")


# -- the prompt ------------------------------------------------------------------------------


def test_a_chat_prompt_holds_global_memory_and_only_its_own_zone(tmp_path: Path) -> None:
    write(tmp_path / "memory" / "MEMORY.md", "GLOBAL-FACT")
    write(tmp_path / "memory" / "2026-03-14.md", "GLOBAL-NOTE")
    alice = zone_named("telegram", ALICE)
    write(tmp_path / alice.memory_rel / "MEMORY.md", "ALICE-FACT")
    write(tmp_path / alice.memory_rel / "2026-03-14.md", "ALICE-NOTE")
    write(tmp_path / alice.memory_rel / "2026-03-13.md", "ALICE-YESTERDAY")
    context = builder(tmp_path)
    mine = context.system_prompt(dm(ALICE))
    assert all(m in mine for m in ("GLOBAL-FACT", "GLOBAL-NOTE", "ALICE-FACT", "ALICE-NOTE"))
    assert "ALICE-YESTERDAY" not in mine
    assert mine.index("GLOBAL-NOTE") < mine.index("ALICE-FACT") < mine.index("ALICE-NOTE")
    assert mine.endswith(folder_section(alice))
    assert "`chats/telegram-111/`" in mine and "chats/telegram-111/files/" in mine
    for other in (dm(BOB), ChatRef("telegram", GROUP), ChatRef("slack", ALICE)):
        prompt = context.system_prompt(other)
        assert "GLOBAL-FACT" in prompt and "ALICE" not in prompt
        assert f"`{zone_for(other).rel.as_posix()}/`" in prompt
    # no chat at all (a planner, a tool's own call): the global part, no chat's memory
    assert "ALICE" not in context.system_prompt() and "Your folder" not in \
        context.system_prompt()


def test_the_chat_part_bounds_today_s_note_and_names_the_file(tmp_path: Path) -> None:
    zone = zone_named("slack", "C1")
    paragraphs = "".join(f"paragraph {i:05d} " + "x" * 80 + "\n\n" for i in range(500))
    write(tmp_path / zone.memory_rel / "2026-03-14.md", paragraphs)
    prompt = builder(tmp_path).system_prompt(zone)
    assert "paragraph 00499" in prompt and "paragraph 00000" not in prompt
    assert len(prompt.encode()) < DAILY_NOTES_PROMPT_BYTES + 2_000
    assert "(Earlier notes from today are in chats/slack-C1/memory/2026-03-14.md.)" in prompt


def test_the_chat_part_is_rechecked_at_most_once_a_second(tmp_path: Path) -> None:
    clock = Clock()
    context = builder(tmp_path, clock)
    zone = zone_named("telegram", ALICE)
    assert "v1" not in context.system_prompt(zone)
    write(tmp_path / zone.memory_rel / "MEMORY.md", "v1")
    clock.now += 0.5
    assert "v1" not in context.system_prompt(zone)
    clock.now += 0.6
    assert "v1" in context.system_prompt(zone)


def test_the_zone_cache_keeps_only_recent_zones_and_is_capped(tmp_path: Path) -> None:
    clock = Clock()
    context = builder(tmp_path, clock, chat_cache_size=50)
    for i in range(1_000):
        context.system_prompt(zone_named("telegram", str(i)))
    assert context.cached_zones() == 50  # all read within the same second: the cap holds
    clock.now += 1.5
    context.system_prompt(zone_named("telegram", "new"))
    assert context.cached_zones() == 1  # stale entries go with the next read
    assert CHAT_PROMPT_CACHE >= 50


def test_history_budget_counts_the_chat_part(tmp_path: Path) -> None:
    zone = zone_named("telegram", ALICE)
    write(tmp_path / zone.memory_rel / "MEMORY.md", "fact " * 4_000)  # ~5,000 tokens
    context = builder(tmp_path, max_context_tokens=5_500)
    for i in range(10):
        context.sessions.append("s", {"role": "user", "content": f"q{i} " + "u" * 400})
        context.sessions.append("s", {"role": "assistant", "content": f"a{i} " + "a" * 400})
    assert len(context.history("s", "now")) == 20  # no chat: the small global prompt
    assert len(context.history("s", "now", chat=zone)) < 10  # her memory takes room


def test_the_heartbeat_has_its_own_scope(tmp_path: Path) -> None:
    target = ChatRef("telegram", ALICE)
    beat = ChatRef("telegram", ALICE, sender_id="heartbeat", origin=QUIET_TURN_ORIGIN,
                   session_key="heartbeat")
    write(tmp_path / zone_for(target).memory_rel / "MEMORY.md", "ALICE-FACT")
    write(tmp_path / zone_for(beat).memory_rel / "MEMORY.md", "HEARTBEAT-FACT")
    context = builder(tmp_path)
    assert zone_for(beat).name == "quiet-heartbeat"
    beat_prompt = context.system_prompt(beat)
    assert "HEARTBEAT-FACT" in beat_prompt and "ALICE-FACT" not in beat_prompt
    assert "HEARTBEAT-FACT" not in context.system_prompt(target)


# -- consolidation ---------------------------------------------------------------------------


async def test_consolidation_writes_into_the_chat_zone_only(tmp_path: Path) -> None:
    sessions = FileSessionStore(tmp_path / "sessions")
    memory = MemoryStore(Beneath(tmp_path), today=lambda: TODAY)
    for i in range(7):
        sessions.append("telegram:111", {"role": "user" if i % 2 == 0 else "assistant",
                                         "content": f"m{i}"})
    consolidator = Consolidator(sessions, memory, lambda: Answers(SUMMARY_REPLY),
                                ConsolidationPolicy(threshold_messages=4, keep_last=2))
    task = consolidator.schedule("telegram:111", zone_named("telegram", ALICE))
    assert task is not None and await task
    zone = memory.for_zone(zone_named("telegram", ALICE))
    assert MARK in zone.read_long_term() and MARK in zone.read_daily()
    assert "**Conversation summary** (telegram:111, messages 0–4)" in zone.read_daily()
    assert not (tmp_path / "memory").exists()  # global memory: untouched


class Answers:
    """A provider: answers consolidation requests with `summary`, chat turns with an echo
    of the input; records every request's messages."""

    name = "fake"

    def __init__(self, summary: str) -> None:
        self.summary = summary
        self.requests: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        self.requests.append(messages)
        if "maintain the memory of a chat assistant" in messages[0]["content"]:
            return ProviderResult(content=self.summary)
        return ProviderResult(content=f"echo: {messages[-1]['content']}")

    async def close(self) -> None:
        return None


class Bot:
    """A real AgentDomain + consolidator over one workspace, wired as the daemon wires it."""

    def __init__(self, root: Path) -> None:
        self.clock = Clock()
        self.model = Answers(SUMMARY_REPLY)
        self.sessions = FileSessionStore(root / "sessions")
        self.memory = MemoryStore(Beneath(root), today=lambda: TODAY)
        decisions = DecisionService(FileDecisionStore(root / "d.json"))
        self.context = ContextBuilder(root, self.memory, decisions, self.sessions,
                                      clock=self.clock)
        loop = AgentLoop(FileRunJournal(root / "threads"), lambda: self.model, ToolRegistry(),
                         self.context.system_prompt,
                         lambda state, approved: ToolContext(root, state.chat))
        self.consolidator = Consolidator(self.sessions, self.memory, lambda: self.model,
                                         ConsolidationPolicy(threshold_messages=4,
                                                             keep_last=2))
        self.tasks: list[asyncio.Task[bool]] = []
        self.agent = AgentDomain(self.context, self.sessions, loop,
                                 on_turn_finished=self._after_turn)
        self.count = 0

    def _after_turn(self, key: str, chat: ChatRef) -> None:
        task = self.consolidator.schedule(key, zone_for(chat))
        if task is not None:
            self.tasks.append(task)

    async def say(self, chat_id: str, sender: str, text: str) -> list[dict[str, Any]]:
        """One message; the system prompt of the request it caused."""
        self.count += 1
        self.clock.now += 2  # past the prompt's one-second recheck
        before = len(self.model.requests)
        message = InboundMessage("telegram", chat_id, str(self.count), sender, text,
                                 is_direct=not chat_id.startswith("-"))
        reply = await self.agent.respond(message, text)
        assert reply.content == f"echo: {text}"
        await asyncio.gather(*self.tasks)
        self.tasks.clear()
        return self.model.requests[before]


async def test_alice_recalls_her_dm_memory_and_bob_never_sees_it(tmp_path: Path) -> None:
    bot = Bot(tmp_path)
    await bot.say(ALICE, ALICE, f"my favourite colour is teal {MARK}")
    await bot.say(ALICE, ALICE, "noted?")
    await bot.say(ALICE, ALICE, "and another thing")  # past the threshold: consolidated
    zone = bot.memory.for_zone(zone_named("telegram", ALICE))
    assert MARK in zone.read_long_term()
    assert bot.memory.read_long_term() == "" and bot.memory.read_daily() == ""
    later = await bot.say(ALICE, ALICE, "what is my favourite colour?")
    assert MARK in later[0]["content"]  # her system prompt: her zone's memory
    seen_by_bob = [await bot.say(BOB, BOB, "hello from bob"),
                   await bot.say(GROUP, BOB, "hello group"),
                   await bot.say(GROUP, ALICE, "alice in the group")]
    for request in seen_by_bob:
        assert all(MARK not in str(m["content"]) for m in request)


@pytest.mark.parametrize("origin", [QUIET_TURN_ORIGIN, ""])
def test_a_quiet_zone_is_never_the_target_chat_s(origin: str) -> None:
    chat = ChatRef("telegram", ALICE, origin=origin, session_key="cron:job1")
    zone = zone_for(chat)
    assert (zone == ChatZone("quiet-cron-job1")) is bool(origin)
