"""Memory consolidation with a scripted summarizer: writes, markers, caps, failures, races."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.consolidate import (
    CONSOLIDATED_TYPE,
    ConsolidationPolicy,
    Consolidator,
    consolidate,
    consolidate_with_provider,
    consolidation_due,
    maybe_consolidate,
    parse_summary,
    session_progress,
    strip_fences,
)
from soulflow.agent.context import ContextBuilder
from soulflow.agent.memory import FACTS_HEADING, MemoryStore, merge_facts, trim_to_cap
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.sessions import FileSessionStore, session_filename
from soulflow.contracts import ProviderError, ProviderResult
from soulflow.decision.service import DecisionService
from soulflow.security.zones import zone_named
from soulflow.storage.beneath import Beneath

TODAY = dt.date(2026, 3, 14)
KEY = "telegram:42"
ZONE = zone_named("telegram", "42")
REPLY = "SUMMARY:\nWe planned the launch.\n\nFACTS:\n- Launch is on Friday\n- Mina owns QA"


class Script:
    """A `Summarize`: answers summary and rewrite requests from queues, records each call."""

    def __init__(self, *summaries: str | Exception, rewrites: tuple[str | Exception, ...] = (),
                 on_call: Any = None) -> None:
        self.summaries = list(summaries)
        self.rewrites = list(rewrites)
        self.calls: list[list[dict[str, Any]]] = []
        self.on_call = on_call

    async def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.calls.append(messages)
        if self.on_call is not None:
            self.on_call()
        await asyncio.sleep(0)
        rewrite = messages[0]["content"].startswith("You edit the long-term memory")
        answer = (self.rewrites if rewrite else self.summaries).pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.sessions = FileSessionStore(tmp_path / "sessions")
        self.memory = MemoryStore(Beneath(tmp_path), today=lambda: TODAY)

    def chat(self, count: int, start: int = 0, key: str = KEY) -> None:
        for i in range(start, start + count):
            role = "user" if i % 2 == 0 else "assistant"
            self.sessions.append(key, {"role": role, "content": f"message {i}"})

    def snapshot(self) -> dict[str, bytes]:
        files = [*(self.root / "memory").glob("*.md"), *(self.root / "sessions").glob("*")]
        return {p.name: p.read_bytes() for p in files}

    def markers(self, key: str = KEY) -> list[dict[str, Any]]:
        return [r for r in self.sessions.range(key, 0) if r.get("_type") == CONSOLIDATED_TYPE]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


async def test_below_threshold_does_nothing(rig: Rig) -> None:
    rig.chat(60)
    script = Script(REPLY)
    assert not consolidation_due(rig.sessions, KEY, 60)
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script) is False
    assert script.calls == [] and rig.markers() == []


async def test_consolidation_writes_daily_memory_and_marker_once(rig: Rig) -> None:
    rig.memory.write_long_term("# Long-term memory\n\nThe office is in Seoul.\n")
    rig.chat(61)
    script = Script(REPLY)
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script) is True
    daily = rig.memory.read_daily()
    assert daily.startswith("# 2026-03-14")
    assert f"({KEY}, messages 0–40): We planned the launch." in daily
    long_term = rig.memory.read_long_term()
    assert long_term.startswith("# Long-term memory\n\nThe office is in Seoul.\n")
    assert f"{FACTS_HEADING}\n\n- Launch is on Friday\n- Mina owns QA\n" in long_term
    assert [(m["through"], m["count"]) for m in rig.markers()] == [(40, 61)]
    transcript = script.calls[0][1]["content"]
    assert "[0] user: message 0" in transcript and "[40] user: message 40" in transcript
    assert "message 41" not in transcript  # the last keep_last=20 stay out
    assert "The office is in Seoul." in transcript  # the model sees what memory holds
    before = rig.snapshot()
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script) is False
    again = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20, summarize=script)
    assert not again.ran and again.reason == "nothing to consolidate"
    assert len(script.calls) == 1 and rig.snapshot() == before


async def test_prompt_keeps_secret_references(rig: Rig) -> None:
    rig.sessions.append(KEY, {"role": "user", "content": "deploy with {{secret:DEPLOY_KEY}}"})
    rig.chat(3, start=1)
    script = Script("SUMMARY: Deployed with {{secret:DEPLOY_KEY}}.\nFACTS:\n- none")
    result = await consolidate(rig.sessions, rig.memory, KEY, keep_last=0, summarize=script)
    assert result.ran and result.facts_added == 0
    instructions, material = (m["content"] for m in script.calls[0])
    assert "{{secret:NAME}}" in instructions and "never guess" in instructions
    assert "{{secret:DEPLOY_KEY}}" in material
    assert "{{secret:DEPLOY_KEY}}" in rig.memory.read_daily()
    assert rig.memory.read_long_term() == ""  # no facts: MEMORY.md untouched


@pytest.mark.parametrize("failure", [
    ProviderError("server", "boom", provider="fake"),
    TimeoutError(),
    ValueError("the model returned an empty answer"),
])
async def test_provider_failure_leaves_everything_unchanged(
        rig: Rig, failure: Exception, caplog: pytest.LogCaptureFixture) -> None:
    rig.memory.write_long_term("# Memory\n")
    rig.chat(61)
    before = rig.snapshot()
    with caplog.at_level(logging.WARNING, logger="soulflow.agent.consolidate"):
        result = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20,
                                   summarize=Script(failure))
    assert not result.ran and result.failed
    assert rig.snapshot() == before and not rig.memory.daily_path().exists()
    assert "nothing written" in caplog.text


async def test_empty_or_formless_replies(rig: Rig) -> None:
    rig.chat(61)
    failed = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20,
                               summarize=Script("SUMMARY:\n\nFACTS:\n- none"))
    assert failed.failed and rig.markers() == []
    plain = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20,
                              summarize=Script("Just a plain paragraph."))
    assert plain.ran and "Just a plain paragraph." in rig.memory.read_daily()


async def test_memory_over_cap_is_rewritten_by_the_model(rig: Rig) -> None:
    rig.memory.write_long_term("# Memory\n\n" + "".join(f"- old fact {i}\n" for i in range(40)))
    rig.chat(61)
    policy = ConsolidationPolicy(memory_cap_bytes=400)
    script = Script(REPLY, rewrites=("```markdown\n# Memory\n\n- Launch is on Friday\n```",))
    result = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20, summarize=script,
                               policy=policy)
    assert result.ran and result.facts_added == 2
    assert rig.memory.read_long_term() == "# Memory\n\n- Launch is on Friday\n"
    rewrite = script.calls[1]
    assert "400 bytes" in rewrite[0]["content"] and "{{secret:NAME}}" in rewrite[0]["content"]
    assert "- Mina owns QA" in rewrite[1]["content"]


async def test_memory_still_over_cap_keeps_the_newest_facts(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    rig.memory.write_long_term("# Memory\n\n" + "".join(f"- old fact {i}\n" for i in range(40)))
    rig.chat(61)
    policy = ConsolidationPolicy(memory_cap_bytes=200)
    script = Script(REPLY, rewrites=("useless " * 200,))  # longer than the input: ignored
    with caplog.at_level(logging.WARNING, logger="soulflow.agent.consolidate"):
        assert (await consolidate(rig.sessions, rig.memory, KEY, keep_last=20,
                                  summarize=script, policy=policy)).ran
    text = rig.memory.read_long_term()
    assert len(text.encode()) <= 200
    assert "- Launch is on Friday\n- Mina owns QA" in text and "- old fact 39" in text
    assert "- old fact 0\n" not in text and text.startswith("# Memory")
    assert "still over 200 bytes" in caplog.text


async def test_rewrite_failure_leaves_everything_unchanged(rig: Rig) -> None:
    rig.memory.write_long_term("# Memory\n\n" + "- fact\n" * 100)
    rig.chat(61)
    before = rig.snapshot()
    result = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20,
                               summarize=Script(REPLY, rewrites=(TimeoutError(),)),
                               policy=ConsolidationPolicy(memory_cap_bytes=300))
    assert result.failed and rig.snapshot() == before


async def test_user_edit_during_the_model_call_wins(rig: Rig) -> None:
    rig.memory.write_long_term("# Memory\n")
    rig.chat(61)
    script = Script(REPLY, on_call=lambda: rig.memory.write_long_term("# Edited by hand\n"))
    result = await consolidate(rig.sessions, rig.memory, KEY, keep_last=20, summarize=script)
    assert result.failed and rig.memory.read_long_term() == "# Edited by hand\n"
    assert rig.markers() == [] and not rig.memory.daily_path().exists()


async def test_messages_arriving_during_the_call_are_counted(rig: Rig) -> None:
    rig.chat(61)
    script = Script(REPLY, REPLY, on_call=lambda: rig.chat(5, start=61)
                    if len(script.calls) == 1 else None)
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script)
    assert [(m["through"], m["count"]) for m in rig.markers()] == [(40, 66)]
    rig.chat(61, start=66)
    progress = session_progress(rig.sessions, KEY)
    assert progress.through == 40 and progress.total == 127
    assert [i for i, _ in progress.messages] == list(range(41, 127))
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script)
    assert [(m["through"], m["count"]) for m in rig.markers()] == [(40, 66), (106, 127)]
    assert "messages 41–106" in rig.memory.read_daily()


async def test_progress_reads_beyond_the_first_window(rig: Rig) -> None:
    rig.chat(200)
    await consolidate(rig.sessions, rig.memory, KEY, keep_last=20, summarize=Script(REPLY))
    rig.chat(300, start=200)
    progress = session_progress(rig.sessions, KEY)
    assert progress.through == 179 and progress.total == 500
    assert progress.messages[0][0] == 180 and progress.messages[0][1]["content"] == "message 180"
    fresh = FileSessionStore(rig.root / "sessions")  # a restarted daemon reads the same
    assert session_progress(fresh, KEY).messages[0][0] == 180


async def test_backlog_is_folded_in_batches(rig: Rig) -> None:
    rig.chat(100)
    policy = ConsolidationPolicy(max_transcript_chars=200, max_batches=3)  # ~18 messages each
    script = Script(REPLY, REPLY, REPLY, REPLY)
    assert await maybe_consolidate(rig.sessions, rig.memory, KEY, summarize=script,
                                   policy=policy)
    throughs = [m["through"] for m in rig.markers()]
    assert len(throughs) == 3 and throughs == sorted(throughs) and throughs[-1] < 79
    assert rig.memory.read_long_term().count("- Launch is on Friday") == 1  # deduplicated


async def test_markers_are_not_returned_as_history(rig: Rig) -> None:
    rig.chat(61)
    await consolidate(rig.sessions, rig.memory, KEY, keep_last=20, summarize=Script(REPLY))
    decisions = DecisionService(FileDecisionStore(rig.root / "d.json"))
    context = ContextBuilder(rig.root, rig.memory, decisions, rig.sessions, history_messages=5)
    history = context.history(KEY, "next question")
    assert [m["content"] for m in history] == [f"message {i}" for i in range(56, 61)]
    assert all(set(m) == {"role", "content"} for m in history)
    raw = (rig.root / "sessions" / session_filename(KEY)).read_text()
    assert '"_type": "consolidated"' in raw or '"_type":"consolidated"' in raw


def test_parse_summary_variants() -> None:
    assert parse_summary(REPLY) == ("We planned the launch.",
                                    ["Launch is on Friday", "Mina owns QA"])
    assert parse_summary("## Summary\nLine one\nline two\n## Facts\n1. A\n* B\n- None") == (
        "Line one line two", ["A", "B"])
    assert parse_summary("**Summary:** Short.\n**Facts:**\n- (none)") == ("Short.", [])
    assert parse_summary("Facts about cats are fun.") == ("Facts about cats are fun.", [])
    assert strip_fences("```\nSUMMARY: x\n```") == "SUMMARY: x"
    summary, facts = parse_summary("ramble " * 1000 + "\nFACTS:\n- " + "f" * 900)
    assert len(summary) == 2000 and facts == ["f" * 500]


def test_merge_facts_and_trim() -> None:
    text = f"# Memory\n\n- Team lunch on Tuesdays.\n\n{FACTS_HEADING}\n\n- A\n\n## Other\n\nB\n"
    merged, added = merge_facts(text, ["team lunch on tuesdays", "- New one", "new  ONE."])
    assert added == ["New one"]
    assert f"{FACTS_HEADING}\n\n- A\n- New one\n\n## Other\n\nB\n" in merged
    assert merge_facts(merged, ["A"]) == (merged, [])
    assert merge_facts("", ["First"])[0] == f"{FACTS_HEADING}\n\n- First\n"
    trimmed, dropped = trim_to_cap("# T\n- one\n- two\n- three\n", 16)
    assert trimmed == "# T\n- three\n" and dropped == 2
    assert trim_to_cap("short\n", 100) == ("short\n", 0)


class FakeProvider:
    name = "fake"

    def __init__(self, *answers: str | Exception, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.delay = delay
        self.tools_seen: list[Any] = []

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        self.tools_seen.append(tools)
        await asyncio.sleep(self.delay)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return ProviderResult(content=answer)

    async def close(self) -> None:
        return None


async def test_consolidate_with_provider(rig: Rig) -> None:
    rig.chat(61)
    before = rig.snapshot()
    failing = FakeProvider(ProviderError("rate_limited", "slow down"))
    result = await consolidate_with_provider(failing, rig.sessions, rig.memory, KEY,
                                             keep_last=20)
    assert result.failed and rig.snapshot() == before
    provider = FakeProvider(REPLY)
    result = await consolidate_with_provider(provider, rig.sessions, rig.memory, KEY,
                                             keep_last=20)
    assert result.ran and provider.tools_seen == [None]
    slow = FakeProvider(REPLY, delay=5)
    rig.chat(61, start=61)
    timed_out = await consolidate_with_provider(slow, rig.sessions, rig.memory, KEY,
                                                keep_last=20, timeout_s=0.05)
    assert timed_out.failed


async def test_consolidator_runs_in_the_background_and_backs_off(rig: Rig) -> None:
    clock = [0.0]
    provider = FakeProvider(ProviderError("server", "down"), REPLY, delay=0.01)
    consolidator = Consolidator(rig.sessions, rig.memory, lambda: provider,
                                retry_after_s=60, clock=lambda: clock[0])
    rig.chat(60)
    assert consolidator.schedule(KEY, ZONE) is None  # not due
    rig.chat(1, start=60)
    task = consolidator.schedule(KEY, ZONE)
    assert task is not None and consolidator.schedule(KEY, ZONE) is None  # one per session
    assert await task is False
    assert consolidator.schedule(KEY, ZONE) is None  # resting after the failure
    clock[0] = 61
    task = consolidator.schedule(KEY, ZONE)
    assert task is not None and await task is True
    assert consolidator.schedule(KEY, ZONE) is None and len(rig.markers()) == 1
    assert "Launch is on Friday" in rig.memory.for_zone(ZONE).read_long_term()
    assert rig.memory.read_long_term() == ""  # global memory is the operator's


async def test_consolidator_stop_cancels_without_writing(rig: Rig) -> None:
    rig.chat(61)
    before = rig.snapshot()
    provider = FakeProvider(REPLY, delay=10)
    consolidator = Consolidator(rig.sessions, rig.memory, lambda: provider)
    task = consolidator.schedule(KEY, ZONE)
    assert task is not None
    async with asyncio.timeout(5):  # wait until the model call is under way
        while not provider.tools_seen:
            await asyncio.sleep(0)
    await consolidator.stop()
    assert task.cancelled() and rig.snapshot() == before


async def test_consolidation_calls_are_counted_for_the_chat(rig: Rig, tmp_path: Path) -> None:
    from soulflow.agent.usage import UsageMeter
    from soulflow.backends.file.usage import FileUsageStore

    meter = UsageMeter(FileUsageStore(tmp_path / "usage.json"))
    consolidator = Consolidator(rig.sessions, rig.memory, lambda: FakeProvider(REPLY),
                                usage=meter)
    rig.chat(61)
    task = consolidator.schedule(KEY, ZONE)
    assert task is not None and await task is True
    [(key, totals)] = meter.rows()
    assert (key.chat, key.user, key.source) == ("telegram:42", "", "consolidation")
    assert totals.calls == 1
