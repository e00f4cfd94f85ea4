"""Memory consolidation: fold a long session's older turns into the markdown memory.

The model only sees the last N turns of a session, so older ones would be forgotten. Once a
session has grown past a threshold since the last consolidation, its older turns (all but
the last `keep_last`) are summarised by the model into a paragraph appended to today's note
and durable facts merged into `MEMORY.md`, which is kept under a size cap (the model
rewrites it shorter; if still too long, the oldest facts go). Both live in the session's
**chat zone** (`chats/<zone>/memory/`, see `soulflow.security.zones`), never in global
`memory/`: what Alice says in her DM is recalled in her DM, and nowhere else. The caller
names the zone (`Consolidator.schedule(key, zone)`): it knows the run's chat.

Progress is a session record `{"_type": "consolidated", "through": i, "count": n}`: messages
0..i (counting only records without a `_type`) are consolidated, and `n` messages preceded
the marker, which lets a reader place the marker by reading the file's tail only. The
context builder skips `_type` records, so markers never reach the model as history. A
marker with `through: -1` (written by the trust-zones migration, `RESET_MARKER`) means
"consolidate this session again from its first message": it is due as soon as the session
holds more than `keep_last` messages.

Safety: every model call happens before the first write, so a provider failure leaves the
files as they were; a user's edit of MEMORY.md made meanwhile wins (the run is abandoned and
retried later); a second run over the same messages finds the marker and does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from soulflow.agent.memory import MemoryStore, merge_facts, trim_to_cap
from soulflow.agent.usage import Source, UsageMeter
from soulflow.backends.base import SessionStore
from soulflow.contracts import ChatRef, Provider, ProviderResult
from soulflow.security.zones import ChatZone

log = logging.getLogger(__name__)

CONSOLIDATED_TYPE = "consolidated"
RESET_THROUGH = -1  # a marker with this `through`: consolidate again from the first message
_FIRST_WINDOW = 128
MAX_SUMMARY_CHARS, MAX_FACT_CHARS = 2_000, 500  # bounds what a rambling model can write

Summarize = Callable[[list[dict[str, Any]]], Awaitable[str]]
"""One model call: chat messages (instruction, then material) in, the model's text out."""

SECRET_RULE = (
    "Secret values never appear in the conversation: they are written as references such "
    "as {{secret:NAME}}. Keep every such reference exactly as written, and never guess, "
    "reconstruct or invent a secret value, password, token or key.")

SUMMARY_INSTRUCTIONS = f"""\
You maintain the memory of a chat assistant. You receive an older part of one conversation
and the assistant's current long-term memory. Reply in exactly this format, nothing else:

SUMMARY:
<one paragraph, at most 120 words, in the conversation's language: what was discussed,
decided, done and left open>

FACTS:
- <one durable fact per line, worth remembering for months: people's preferences, names and
  roles, decisions, recurring dates, project details>
(write "- none" when nothing is durable)

Rules:
- {SECRET_RULE}
- Do not repeat facts the current memory already holds.
- Leave out small talk and one-off details."""


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    """When and how much to consolidate (see docs/memory-and-skills.md for tuning).

    `threshold_messages`: consolidate once this many messages follow the last marker.
    `keep_last`: the newest messages stay out of the summary (the model still sees them).
    `max_transcript_chars`: per model call, so one request fits a small model's window; a
    bigger backlog is folded in several batches (at most `max_batches` per trigger).
    """

    threshold_messages: int = 60
    keep_last: int = 20
    memory_cap_bytes: int = 8 * 1024
    max_transcript_chars: int = 24_000
    max_message_chars: int = 2_000
    max_batches: int = 3


@dataclass(slots=True)
class ConsolidationResult:
    """What one `consolidate` call did; `failed` means "try again later", not "nothing to do"."""

    ran: bool
    reason: str = ""
    failed: bool = False
    first: int | None = None
    through: int | None = None
    facts_added: int = 0
    remaining: int = 0


# -- where a session stands ------------------------------------------------------------------


@dataclass(slots=True)
class SessionProgress:
    """Last consolidated message (-1: none), (index, record) of those after it, and total."""

    through: int
    messages: list[tuple[int, dict[str, Any]]]
    total: int


def _is_message(record: dict[str, Any]) -> bool:
    return "_type" not in record  # chat messages; markers and metadata carry a `_type`


def _marker(record: dict[str, Any]) -> tuple[int, int] | None:
    if record.get("_type") != CONSOLIDATED_TYPE:
        return None
    through, count = record.get("through"), record.get("count")
    if isinstance(through, int) and isinstance(count, int) and -1 <= through < count:
        return through, count
    return None  # hand-edited or foreign: ignored rather than trusted


def _progress_from_tail(records: list[dict[str, Any]], complete: bool) -> SessionProgress | None:
    for position in range(len(records) - 1, -1, -1):
        marker = _marker(records[position])
        if marker is None:
            continue
        through, count = marker
        before = [r for r in records[:position] if _is_message(r)]
        after = [r for r in records[position + 1:] if _is_message(r)]
        first = count - len(before)
        if first > through + 1 and not complete:
            return None  # the unconsolidated messages start before this window
        indexed = [(first + i, r) for i, r in enumerate(before + after)]
        return SessionProgress(through, [(i, r) for i, r in indexed if i > through],
                               count + len(after))
    if not complete:
        return None
    messages = [r for r in records if _is_message(r)]
    return SessionProgress(-1, list(enumerate(messages)), len(messages))


def session_progress(sessions: SessionStore, session_key: str) -> SessionProgress:
    """Read from the end of the session file, widening the window until the last marker and
    the messages after it are covered (never the whole file for a consolidated session)."""
    window = _FIRST_WINDOW
    while True:
        records = sessions.last(session_key, window)
        progress = _progress_from_tail(records, complete=len(records) < window)
        if progress is not None:
            return progress
        window *= 4


def reset_marker(count: int) -> dict[str, Any]:
    """The record that makes a session of `count` messages be consolidated again from its
    first message (the trust-zones migration writes it: the old summaries were shared)."""
    return {"_type": CONSOLIDATED_TYPE, "through": RESET_THROUGH, "count": count}


def is_reset(record: dict[str, Any]) -> bool:
    marker = _marker(record)
    return marker is not None and marker[0] == RESET_THROUGH


def consolidation_due(sessions: SessionStore, session_key: str, threshold: int, *,
                      keep_last: int = 0) -> bool:
    """More than `threshold` messages since the last marker (cheap: the cached tail); or
    the last marker is a reset one and more than `keep_last` messages are behind it."""
    records = sessions.last(session_key, threshold + 1)
    for position in range(len(records) - 1, -1, -1):
        marker = _marker(records[position])
        if marker is None:
            continue
        if marker[0] != RESET_THROUGH:
            return False
        after = sum(1 for r in records[position + 1:] if _is_message(r))
        return marker[1] + after > keep_last
    return sum(1 for r in records if _is_message(r)) > threshold


# -- talking to the model --------------------------------------------------------------------

_SECTION = re.compile(r"^\s*(?:#{1,6}\s*)?\**(summary|facts)\**\s*(?::\**\s*(.*))?$", re.I)
_FACT_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")
_FENCED = re.compile(r"^\s*```[\w-]*[ \t]*\n(.*?)\n?```\s*$", re.S)
_NO_FACT = frozenset({"", "none", "(none)", "n/a", "nothing", "-"})


def strip_fences(text: str) -> str:
    """Drop a ```...``` wrapper (and its info string) some models put around an answer."""
    match = _FENCED.match(text)
    return (match.group(1) if match else text).strip()


def parse_summary(reply: str) -> tuple[str, list[str]]:
    """The SUMMARY paragraph and the FACTS of a reply; text without sections is a summary."""
    sections: dict[str, list[str]] = {"summary": [], "facts": []}
    current = "summary"
    for line in strip_fences(reply).splitlines():
        match = _SECTION.match(line)
        if match:
            current = match.group(1).lower()
            line = match.group(2) or ""
        if line.strip():
            sections[current].append(line.strip())
    summary = " ".join(sections["summary"])[:MAX_SUMMARY_CHARS]
    facts = [_FACT_BULLET.sub("", line).strip()[:MAX_FACT_CHARS] for line in sections["facts"]]
    return summary, [f for f in facts if f.casefold().strip(".") not in _NO_FACT]


def _transcript(batch: list[tuple[int, dict[str, Any]]], max_message_chars: int) -> str:
    lines = []
    for index, record in batch:
        role, content = record.get("role"), record.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str):
            continue
        if len(content) > max_message_chars:
            content = content[:max_message_chars] + " …[cut]"
        lines.append(f"[{index}] {role}: {content}")
    return "\n".join(lines)


def _batch(candidates: list[tuple[int, dict[str, Any]]], policy: ConsolidationPolicy
           ) -> list[tuple[int, dict[str, Any]]]:
    """The oldest candidates whose transcript fits `max_transcript_chars` (at least one)."""
    size, end = 0, 0
    for _, record in candidates:
        content = record.get("content")
        size += min(len(content) if isinstance(content, str) else 0, policy.max_message_chars)
        if end and size > policy.max_transcript_chars:
            break
        end += 1
    return candidates[:end]


def summary_request(session_key: str, first: int, through: int, transcript: str,
                    memory_text: str) -> list[dict[str, Any]]:
    material = (f"Current long-term memory of this chat (MEMORY.md):\n\n"
                f"{memory_text.strip() or '(empty)'}\n\n"
                f"Conversation {session_key}, messages {first} to {through}:\n\n{transcript}")
    return [{"role": "system", "content": SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": material}]


def rewrite_request(memory_text: str, cap_bytes: int) -> list[dict[str, Any]]:
    instructions = (
        "You edit the long-term memory file of a chat assistant. Rewrite the file below to "
        f"at most {cap_bytes} bytes of UTF-8 (about {cap_bytes} Latin letters, or "
        f"{cap_bytes // 3} Korean, Chinese or Japanese characters): merge duplicates, drop "
        "what is outdated or trivial, prefer newer facts when two conflict, and keep the "
        f"headings and the bullet style. {SECRET_RULE} Reply with the new file content only.")
    return [{"role": "system", "content": instructions},
            {"role": "user", "content": memory_text}]


def provider_summarizer(provider: Provider, *, timeout_s: float = 120.0,
                        counted: Callable[[ProviderResult], object] | None = None
                        ) -> Summarize:
    """A `Summarize` that makes one plain chat call (no tools) with a time limit; `counted`
    gets each call's result (its usage is recorded under consolidation)."""
    async def summarize(messages: list[dict[str, Any]]) -> str:
        result = await asyncio.wait_for(provider.chat(messages, None), timeout_s)
        if counted is not None:
            counted(result)
        if not result.content.strip():
            raise ValueError("the model returned an empty answer")
        return result.content
    return summarize


# -- consolidation ---------------------------------------------------------------------------


async def consolidate(sessions: SessionStore, memory: MemoryStore, session_key: str, *,
                      keep_last: int, summarize: Summarize,
                      policy: ConsolidationPolicy | None = None) -> ConsolidationResult:
    """Fold one batch of the unconsolidated messages (all but the last `keep_last`) into
    memory; a no-op when there are none. `policy` gives the size limits only."""
    policy = policy or ConsolidationPolicy()
    progress = session_progress(sessions, session_key)
    candidates = progress.messages[:len(progress.messages) - max(keep_last, 0)]
    if not candidates:
        return ConsolidationResult(False, "nothing to consolidate")
    batch = _batch(candidates, policy)
    first, through = batch[0][0], batch[-1][0]
    transcript = _transcript(batch, policy.max_message_chars)
    memory_before = memory.read_long_term()
    summary, memory_after, added = "", memory_before, []
    if transcript:
        try:
            reply = await summarize(summary_request(session_key, first, through, transcript,
                                                    memory_before))
            summary, facts = parse_summary(reply)
            if not summary and not facts:
                raise ValueError("the reply had neither a summary nor facts")
            memory_after, added = merge_facts(memory_before, facts)
            if added:
                memory_after = await _within_cap(memory_after, policy.memory_cap_bytes,
                                                 summarize)
        except Exception as exc:
            log.warning("memory consolidation of %s failed, nothing written: %s: %s",
                        session_key, type(exc).__name__, exc)
            return ConsolidationResult(False, f"summarize failed: {type(exc).__name__}",
                                       failed=True)
    now = session_progress(sessions, session_key)  # the session may have moved meanwhile
    if now.through >= first:
        return ConsolidationResult(False, "already consolidated by another run")
    try:
        if added and not memory.replace_long_term(memory_before, memory_after):
            log.info("MEMORY.md changed during consolidation of %s; will retry", session_key)
            return ConsolidationResult(False, "MEMORY.md changed meanwhile", failed=True)
        if summary:
            label = f"**Conversation summary** ({session_key}, messages {first}–{through}):"
            if label not in memory.read_daily():  # a crash after this write must not repeat
                memory.append_daily(f"{label} {summary}")
    except OSError as exc:  # a link planted as today's note is refused, never written
        log.warning("memory consolidation of %s could not write to %s: %s", session_key,
                    memory.rel, exc)
        return ConsolidationResult(False, f"write refused: {type(exc).__name__}", failed=True)
    sessions.append(session_key, {"_type": CONSOLIDATED_TYPE, "through": through,
                                  "count": now.total})
    remaining = len(candidates) - len(batch)
    log.info("consolidated messages %d-%d of %s (%d new facts)", first, through, session_key,
             len(added))
    return ConsolidationResult(True, "consolidated", first=first, through=through,
                               facts_added=len(added), remaining=remaining)


async def _within_cap(text: str, cap_bytes: int, summarize: Summarize) -> str:
    """`text` if it fits; else the model's shorter rewrite; else the newest facts that fit."""
    if len(text.encode("utf-8")) <= cap_bytes:
        return text  # the common case: no extra model call
    rewritten = strip_fences(await summarize(rewrite_request(text, cap_bytes)))
    if rewritten and len(rewritten.encode("utf-8")) < len(text.encode("utf-8")):
        text = rewritten.rstrip() + "\n"
    if len(text.encode("utf-8")) <= cap_bytes:
        return text
    trimmed, dropped = trim_to_cap(text, cap_bytes)
    log.warning("MEMORY.md still over %d bytes after a rewrite; dropped its %d oldest lines",
                cap_bytes, dropped)
    return trimmed


async def consolidate_with_provider(provider: Provider, sessions: SessionStore,
                                    memory: MemoryStore, session_key: str, *, keep_last: int,
                                    policy: ConsolidationPolicy | None = None,
                                    timeout_s: float = 120.0) -> ConsolidationResult:
    """`consolidate` with the summaries written by `provider`."""
    return await consolidate(sessions, memory, session_key, keep_last=keep_last,
                             summarize=provider_summarizer(provider, timeout_s=timeout_s),
                             policy=policy)


async def run_due(sessions: SessionStore, memory: MemoryStore, session_key: str, *,
                  summarize: Summarize, policy: ConsolidationPolicy | None = None
                  ) -> list[ConsolidationResult]:
    """Every batch run for one trigger (empty when the session is not due)."""
    policy = policy or ConsolidationPolicy()
    results: list[ConsolidationResult] = []
    if not consolidation_due(sessions, session_key, policy.threshold_messages,
                             keep_last=policy.keep_last):
        return results
    for _ in range(max(policy.max_batches, 1)):
        results.append(await consolidate(sessions, memory, session_key, summarize=summarize,
                                         keep_last=policy.keep_last, policy=policy))
        if not results[-1].ran or results[-1].remaining <= 0:
            break
    return results


async def maybe_consolidate(sessions: SessionStore, memory: MemoryStore, session_key: str, *,
                            summarize: Summarize, policy: ConsolidationPolicy | None = None
                            ) -> bool:
    """Consolidate if the session is past the threshold; True if anything was written."""
    return any(r.ran for r in await run_due(sessions, memory, session_key,
                                            summarize=summarize, policy=policy))


class Consolidator:
    """`schedule(key, zone)` after each answered message: a cheap synchronous check (the
    cached tail), then a background task, at most one per session, so a reply never waits
    for it. The summary and facts go to `zone`'s memory (`memory.for_zone`), never to the
    global memory `memory` stands for. After a failure the session rests `retry_after_s`: an
    outage costs no call per message."""

    def __init__(self, sessions: SessionStore, memory: MemoryStore,
                 provider: Callable[[], Provider], policy: ConsolidationPolicy | None = None,
                 *, timeout_s: float = 120.0, retry_after_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic,
                 usage: UsageMeter | None = None) -> None:
        self.sessions = sessions
        self._usage = usage
        self.memory = memory
        self.policy = policy or ConsolidationPolicy()
        self._provider = provider
        self._timeout_s = timeout_s
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[bool]] = {}
        self._failed_at: dict[str, float] = {}

    def schedule(self, session_key: str, zone: ChatZone) -> asyncio.Task[bool] | None:
        """Start a consolidation task for the session if it is due; None otherwise. `zone`
        is the chat zone of the session's runs (`zone_for(chat)`): its memory is written."""
        failed_at = self._failed_at.get(session_key, float("-inf"))
        if (session_key in self._tasks or self._clock() - failed_at < self._retry_after_s
                or not consolidation_due(self.sessions, session_key,
                                         self.policy.threshold_messages,
                                         keep_last=self.policy.keep_last)):
            return None
        task = asyncio.get_running_loop().create_task(self._run(session_key, zone),
                                                      name=f"consolidate:{session_key}")
        self._tasks[session_key] = task
        task.add_done_callback(lambda _t, key=session_key: self._tasks.pop(key, None))
        return task

    def _counter(self, session_key: str) -> Callable[[ProviderResult], object] | None:
        """Records a consolidation call for the session's chat (`provider:chat[:thread]`)."""
        if self._usage is None:
            return None
        usage = self._usage
        provider, _, rest = session_key.partition(":")
        chat = ChatRef(provider, rest.split(":", 1)[0]) if rest else ChatRef("", "")
        return lambda result: usage.record(result, chat, Source.CONSOLIDATION)

    async def _run(self, session_key: str, zone: ChatZone) -> bool:
        try:
            summarize = provider_summarizer(self._provider(), timeout_s=self._timeout_s,
                                            counted=self._counter(session_key))
            results = await run_due(self.sessions, self.memory.for_zone(zone), session_key,
                                    summarize=summarize, policy=self.policy)
        except Exception:  # a bug here must never take the daemon down
            log.exception("memory consolidation of %s crashed", session_key)
            results = [ConsolidationResult(False, "crashed", failed=True)]
        if any(r.failed for r in results):
            self._failed_at[session_key] = self._clock()
        else:
            self._failed_at.pop(session_key, None)
        return any(r.ran for r in results)

    async def stop(self) -> None:
        """Cancel running consolidations (nothing is half-written: writes follow all awaits)."""
        for task in (tasks := list(self._tasks.values())):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
