"""The daemon never follows the agent's links (issue 17, findings 6 and 7).

A prompt-injected run could plant links in the workspace; before trust zones the daemon read
`templates/`, `agents/`, `skills/`, `memory/MEMORY.md` and today's note through them (host
files and vault-key bytes went into model requests) and appended consolidation text through
`memory/<today>.md -> /outside/file`. Each test plants one such link and checks the
daemon-side read or write refuses it, logs it, and never touches the target — on both
resolvers: the kernel's `openat2` and the component-wise `O_NOFOLLOW` fallback.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from soulflow.agent.consolidate import ConsolidationPolicy, run_due
from soulflow.agent.context import ContextBuilder
from soulflow.agent.memory import MemoryStore
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.heartbeat import FileHeartbeatState
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.contracts import ChatRef
from soulflow.decision.service import DecisionService
from soulflow.heartbeat.service import HeartbeatService, TickStatus
from soulflow.security.zones import zone_named
from soulflow.storage.beneath import Beneath, RefusedPath

TODAY = dt.date(2026, 3, 14)
KEY_BYTES = b"KEYBYTES-" + b"k" * 23
HOST_TEXT = "HOST-FILE-CONTENT"
ALICE = ChatRef("telegram", "111")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    key = root / "runtime" / "security" / "master.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(KEY_BYTES)
    inbound = root / "runtime" / "bus" / "inbound.jsonl"
    inbound.parent.mkdir(parents=True)
    inbound.write_text('{"text": "BOB-PRIVATE-MESSAGE"}\n')
    (tmp_path / "outside.md").write_text(HOST_TEXT)
    (root / "templates").mkdir()
    (root / "templates" / "A.md").write_text("TEMPLATE-OK")
    return root


def context_for(root: Path) -> ContextBuilder:
    memory = MemoryStore(Beneath(root), today=lambda: TODAY)
    return ContextBuilder(root, memory, DecisionService(FileDecisionStore(root / "d.json")),
                          FileSessionStore(root / "runtime" / "sessions"))


def target(root: Path, name: str) -> Path:
    return {"key": root / "runtime" / "security" / "master.key",
            "inbound": root / "runtime" / "bus" / "inbound.jsonl",
            "outside": root.parent / "outside.md"}[name]


def plant(link: Path, to: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(to)


ZONE_MEMORY = zone_named("telegram", "111").memory_rel.as_posix()
PLANTED = [
    ("templates/evil.md", "key"),
    ("templates/evil.md", "outside"),
    ("agents/evil.md", "key"),
    ("agents/evil.md", "outside"),
    ("skills/evil/SKILL.md", "inbound"),
    ("skills/evil/SKILL.md", "outside"),
    ("memory/MEMORY.md", "key"),
    ("memory/2026-03-14.md", "outside"),
    (f"{ZONE_MEMORY}/MEMORY.md", "key"),
    (f"{ZONE_MEMORY}/2026-03-14.md", "outside"),
]


@pytest.mark.parametrize(("where", "to"), PLANTED)
def test_a_planted_link_never_reaches_the_prompt(ws: Path, resolver: str, where: str, to: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    plant(ws / where, target(ws, to))
    with caplog.at_level(logging.WARNING):
        prompt = context_for(ws).system_prompt(ALICE)
    assert "TEMPLATE-OK" in prompt  # the rest of the prompt is still there
    for leaked in ("KEYBYTES", "kkkkkkkk", HOST_TEXT, "BOB-PRIVATE"):
        assert leaked not in prompt
    assert where.split("/")[-2 if where.startswith("skills") else -1] in caplog.text


@pytest.mark.parametrize("folder", ["templates", "agents", "memory", "skills", ZONE_MEMORY])
def test_a_folder_swapped_for_a_link_is_refused(tmp_path: Path, resolver: str,
                                                folder: str) -> None:
    root = tmp_path / "ws"
    secrets = root / "runtime" / "security"
    secrets.mkdir(parents=True)
    for name in ("MEMORY.md", "2026-03-14.md", "x.md"):
        (secrets / name).write_text(HOST_TEXT)
    (secrets / "x").mkdir()
    (secrets / "x" / "SKILL.md").write_text(f"---\ndescription: {HOST_TEXT}\n---\n")
    plant(root / folder, secrets)
    assert HOST_TEXT not in context_for(root).system_prompt(ALICE)


async def test_heartbeat_md_as_a_link_is_refused(ws: Path, resolver: str) -> None:
    plant(ws / "HEARTBEAT.md", target(ws, "outside"))
    (ws.parent / "outside.md").write_text("- [ ] check the backup of /srv\n")  # actionable
    state = FileHeartbeatState(ws / "runtime" / "heartbeat" / "state.json")
    service = HeartbeatService(ws, state, runner=None,  # type: ignore[arg-type]
                               target=ALICE, interval_s=60)
    result = await service.tick()  # with the link followed, the runner (None) would run
    assert result.status is TickStatus.MISSING and service.model_calls == 0


# -- appends and rewrites (finding 7) --------------------------------------------------------


@pytest.mark.parametrize("folder", ["memory", ZONE_MEMORY])
def test_an_append_never_writes_through_a_link(ws: Path, resolver: str, folder: str) -> None:
    outside = target(ws, "outside")
    plant(ws / folder / "2026-03-14.md", outside)
    store = MemoryStore(Beneath(ws), folder, today=lambda: TODAY)
    with pytest.raises(RefusedPath):
        store.append_daily("consolidation text")
    assert outside.read_text() == HOST_TEXT


def test_a_rewrite_replaces_the_link_never_its_target(ws: Path, resolver: str) -> None:
    key = target(ws, "key")
    plant(ws / ZONE_MEMORY / "MEMORY.md", key)
    store = MemoryStore(Beneath(ws), ZONE_MEMORY)
    assert store.read_long_term() == ""  # refused, read as empty
    store.write_long_term("- a fact\n")
    assert key.read_bytes() == KEY_BYTES
    assert not (ws / ZONE_MEMORY / "MEMORY.md").is_symlink()


async def test_consolidation_refuses_a_linked_daily_note(ws: Path, resolver: str) -> None:
    outside = target(ws, "outside")
    plant(ws / ZONE_MEMORY / "2026-03-14.md", outside)
    sessions = FileSessionStore(ws / "runtime" / "sessions")
    for i in range(7):
        sessions.append("telegram:111", {"role": "user", "content": f"m{i}"})
    memory = MemoryStore(Beneath(ws), ZONE_MEMORY, today=lambda: TODAY)

    async def summarize(messages: object) -> str:
        return "SUMMARY:\nCONSOLIDATION-TEXT\n\nFACTS:\n- none"

    results = await run_due(sessions, memory, "telegram:111", summarize=summarize,
                            policy=ConsolidationPolicy(threshold_messages=4, keep_last=2))
    assert results and results[0].failed and not results[0].ran
    assert outside.read_text() == HOST_TEXT
    assert not [r for r in sessions.last("telegram:111", 20) if r.get("_type")]
