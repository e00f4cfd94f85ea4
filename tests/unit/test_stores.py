"""FileSessionStore, MemoryStore and DecisionService."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from soulflow.agent.memory import MemoryStore
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.decision.rules import canonical_key
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath


def test_session_append_last_range_and_metadata(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    for i in range(30):
        store.append("slack:C1", {"role": "user", "content": f"m{i}"})
    assert [m["content"] for m in store.last("slack:C1", 3)] == ["m27", "m28", "m29"]
    assert [m["content"] for m in store.last("slack:C1", 100)][:2] == ["m0", "m1"]
    assert len(store.last("slack:C1", 100)) == 30
    assert [m["content"] for m in store.range("slack:C1", 5, 8)] == ["m5", "m6", "m7"]
    assert store.metadata("slack:C1")["key"] == "slack:C1"
    first_line = json.loads((tmp_path / "slack%3AC1.jsonl").read_text().splitlines()[0])
    assert first_line["_type"] == "metadata"


def test_session_keys_are_listed_and_file_safe(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    store.append("telegram:-100/../x", {"role": "user", "content": "a"})
    store.append("local:default", {"role": "user", "content": "b"})
    assert {s.key for s in store.list_sessions()} == {"telegram:-100/../x", "local:default"}
    assert all(p.parent == tmp_path for p in tmp_path.iterdir())


def test_session_survives_torn_line_and_empty_file(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    store.append("k", {"role": "user", "content": "ok"})
    store.close()
    path = tmp_path / "k.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"role":"assistant","content":"half')
    store = FileSessionStore(tmp_path)
    assert [m["content"] for m in store.last("k", 10)] == ["ok"]
    store.append("k", {"role": "assistant", "content": "whole"})
    assert [m["content"] for m in store.last("k", 10)] == ["ok", "whole"]
    (tmp_path / "z.jsonl").write_bytes(b"")
    assert store.last("z", 5) == []


def test_session_lru_of_open_files(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, max_open=2)
    for key in ("a", "b", "c", "a"):
        store.append(key, {"role": "user", "content": key})
    assert [m["content"] for m in store.last("a", 5)] == ["a", "a"]


def test_memory_read_write_append_search(tmp_path: Path) -> None:
    memory = MemoryStore(Beneath(tmp_path), ".", today=lambda: dt.date(2026, 11, 22))
    assert memory.read_long_term() == ""
    memory.write_long_term("# Memory\n\nThe deploy window is Friday.\n")
    memory.append_long_term("Team lunch on Tuesdays.")
    memory.append_daily("Discussed the Deploy checklist.")
    memory.append_daily("Second note.")
    assert "Tuesdays" in memory.read_long_term()
    daily = memory.read_daily()
    assert daily.startswith("# 2026-11-22") and "Second note." in daily
    assert memory.daily_path().name == "2026-11-22.md"
    hits = memory.search("deploy")
    assert [h.file for h in hits] == ["MEMORY.md", "2026-11-22.md"]
    assert memory.search("deploy friday")[0].line == "The deploy window is Friday."
    assert memory.search("  ") == []


def test_decisions_canonical_keys_priority_and_dedupe(tmp_path: Path) -> None:
    path = tmp_path / "decisions" / "index.json"
    service = DecisionService(FileDecisionStore(path))
    service.set("Reply Language", "Korean", priority=1)
    assert service.set("reply-language", "English", priority=0).value == "Korean"
    assert service.set("reply_language", "English", priority=2).value == "English"
    service.set("deploy window", "Friday")
    assert [d.key for d in service.list()] == ["reply_language", "deploy_window"]
    reloaded = DecisionService(FileDecisionStore(path))
    assert reloaded.get("REPLY LANGUAGE").value == "English"
    assert "- deploy_window: Friday" in reloaded.compact_text()
    assert reloaded.remove("deploy window") and reloaded.get("deploy window") is None
    with pytest.raises(ValueError):
        canonical_key("  --  ")


def test_corrupt_decisions_file_is_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_text("{broken")
    service = DecisionService(FileDecisionStore(path))
    assert service.list() == []
    assert list(tmp_path.glob("index.json.corrupt-*"))
    service.set("a", "b")
    assert DecisionService(FileDecisionStore(path)).get("a").value == "b"
