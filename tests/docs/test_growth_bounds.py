"""docs/operations.md "What grows with traffic, and its bound": each number in the table is the
constant the code uses, and the row names that constant."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent import context
from soulflow.backends import base
from soulflow.backends.file import inbound, outbox, runs, sessions, workflow
from soulflow.backends.redis import events as redis_events
from soulflow.backends.redis import runs as redis_runs
from soulflow.backends.redis import tasks as redis_tasks
from soulflow.bus import traffic
from soulflow.channels.discord import adapter as discord_adapter
from soulflow.channels.local import adapter as local_adapter
from soulflow.channels.slack import inbound as slack_inbound
from soulflow.channels.telegram import adapter as telegram_adapter
from soulflow.events.hub import EventHub
from soulflow.providers import local_log
from soulflow.security import redact
from soulflow.storage import keyset

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## What grows with traffic, and its bound"


def default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def table_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    section = text[text.index(HEADING):]
    section = section[:section.index("\n## ", len(HEADING))]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith(("| what ", "|---")):
            rows[line.split("|")[1].strip()] = line
    return rows


HOURS = 3600
DAYS = 24 * HOURS

# row -> [(text the row must hold, constant names the row must name)]
EXPECTED: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "model usage": [(f"**{base.USAGE_KEEP_DAYS} days**", ("USAGE_KEEP_DAYS",))],
    "seen inbound ids (never answer a message twice)": [
        (f"**{base.SEEN_WINDOW_S // HOURS} hours**", ("SEEN_WINDOW_S",)),
        (f"{default(keyset.ExpiringKeys, 'cache'):,} recent ids", ("ExpiringKeys(cache",)),
        (f"{default(keyset.ExpiringKeys, 'cache_kib') // 1024} MiB page cache", ("cache_kib",)),
        (f"once every {inbound.EXPIRE_EVERY_S:g} s", ("EXPIRE_EVERY_S",)),
        (f"{keyset.EXPIRE_BATCH:,} at a time", ("EXPIRE_BATCH",)),
        (f"at most {inbound.EXPIRE_BATCHES} batches "
         f"({inbound.EXPIRE_BATCHES * keyset.EXPIRE_BATCH:,} ids)", ("EXPIRE_BATCHES",)),
    ],
    "inbound journal": [(f"every {inbound.COMPACT_AFTER:,} records", ("COMPACT_AFTER",))],
    "outbox": [
        (f"every {outbox.COMPACT_AFTER:,} records", ("COMPACT_AFTER",)),
        (f"last {outbox.ANSWERED_KEPT:,} answered keys", ("ANSWERED_KEPT",)),
        (f"`answered:<key>` for {base.SEEN_WINDOW_S // HOURS} hours", ()),
    ],
    "outbound DLQ": [(f"{base.OUTBOUND_DLQ_MAX:,} letters", ("OUTBOUND_DLQ_MAX",))],
    "inbound quarantine": [(f"{base.INBOUND_DLQ_MAX:,} entries", ("INBOUND_DLQ_MAX",))],
    "workflow events": [
        (f"{workflow.ROTATE_BYTES // 2**20} MiB, then", ("ROTATE_BYTES",)),
        (f"{2 * workflow.ROTATE_BYTES // 2**20} MiB in all", ()),
        (f"keeps {workflow.DEFAULT_INDEX_SIZE:,} ids", ("DEFAULT_INDEX_SIZE",)),
        (f"about {redis_events.DEFAULT_MAX_EVENTS:,} events", ("DEFAULT_MAX_EVENTS",)),
        (f"for {redis_events.SEEN_TTL_S // DAYS} days", ("SEEN_TTL_S",)),
    ],
    "agent runs": [
        (f"every {runs.COMPACT_AFTER:,} events", ("COMPACT_AFTER",)),
        (f"**{runs.ARCHIVE_DAYS} days, at most {runs.ARCHIVE_MAX_BYTES // 2**30} GiB**",
         ("ARCHIVE_DAYS", "ARCHIVE_MAX_BYTES")),
        (f"the last {runs.RECENT_FINISHED} finished", ("RECENT_FINISHED",)),
        (f"**{redis_runs.FINISHED_TTL_S // HOURS} hours**", ("FINISHED_TTL_S",)),
    ],
    "sessions": [(f"at most {sessions.MAX_OPEN} open files with {sessions.TAIL_CACHE} messages "
                  "each", ("MAX_OPEN", "TAIL_CACHE"))],
    "tasks": [
        (f"the last {base.KEEP_FINISHED} finished", ("KEEP_FINISHED",)),
        (f"keeps {redis_tasks.DETAIL_CAP:,} lines", ("DETAIL_CAP",)),
        (f"for {redis_tasks.DETAIL_TTL_S // DAYS} days", ("DETAIL_TTL_S",)),
    ],
    "local chat transcripts": [
        (f"the last {local_adapter._RECENT:,} entries of each of the "
         f"{local_adapter._OPEN_TRANSCRIPTS} chats", ("_RECENT", "_OPEN_TRANSCRIPTS")),
    ],
    "today's memory note": [(f"newest {context.DAILY_NOTES_PROMPT_BYTES:,} bytes",
                             ("DAILY_NOTES_PROMPT_BYTES",))],
    "platform dedupe and caches": [
        (f"Telegram {telegram_adapter._REMEMBERED_SENT:,} sent ids", ("_REMEMBERED_SENT",)),
        (f"Slack and Discord {discord_adapter._RECENT_KEYS:,} keys each",
         ("RecentKeys(limit", "_RECENT_KEYS")),
    ],
    "redaction memo (strings found clean, so a history repeated every turn is scanned once)": [
        (f"{redact.CLEAN_MEMO_CHARS:,} characters in all", ("CLEAN_MEMO_CHARS",)),
    ],
    "live events, per-minute counters": [
        (f"the last {default(EventHub, 'history')} events", ("EventHub(history",)),
        ("one hour of per-minute counts", ("RING_MINUTES",)),
    ],
    "local model server log": [(f"{local_log.LOG_ROTATE_BYTES // 10**6} MB, then",
                                ("LOG_ROTATE_BYTES",))],
}


def test_the_constants_are_whole_units_as_the_table_says_them() -> None:
    assert base.SEEN_WINDOW_S % HOURS == 0 and redis_runs.FINISHED_TTL_S % HOURS == 0
    assert redis_events.SEEN_TTL_S % DAYS == 0 and redis_tasks.DETAIL_TTL_S % DAYS == 0
    assert workflow.ROTATE_BYTES % 2**20 == 0 and runs.ARCHIVE_MAX_BYTES % 2**30 == 0
    assert local_log.LOG_ROTATE_BYTES % 10**6 == 0
    assert default(slack_inbound.RecentKeys, "limit") == discord_adapter._RECENT_KEYS
    assert traffic.RING_MINUTES == 60


@pytest.mark.parametrize("row", sorted(EXPECTED))
def test_each_row_says_what_its_constants_hold(row: str) -> None:
    line = table_rows()[row]
    for text, names in EXPECTED[row]:
        assert text in line, f"{row!r}: expected {text!r} (the code's value)"
        for name in names:
            assert re.search(rf"\b{re.escape(name)}\b", line), f"{row!r}: name {name}"


def test_every_row_is_checked() -> None:
    assert set(table_rows()) - set(EXPECTED) == {"the daemon's log"}
