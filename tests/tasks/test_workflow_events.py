"""WorkflowEventService: journal, dedupe across restarts, redaction, hub, FileTaskStore binding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soulflow.backends.file.workflow import FileWorkflowLog
from soulflow.events.hub import EventHub
from soulflow.events.workflow import WorkflowEvent, WorkflowEventService
from soulflow.security.redact import Redactor

SECRET = "hunter2-super-secret-value"


def service(tmp_path: Path, hub: EventHub | None = None) -> WorkflowEventService:
    return WorkflowEventService(FileWorkflowLog(tmp_path / "runtime" / "events"),
                                workspace=tmp_path, redactor=Redactor([SECRET]), hub=hub)


async def test_append_writes_every_field_and_publishes(tmp_path: Path) -> None:
    hub = EventHub()
    subscription = hub.subscribe()
    events = service(tmp_path, hub)
    record = await events.append(WorkflowEvent(
        "progress", f"using {SECRET}", task_id="t-1", run_id="r-1", agent_id="writer",
        payload={"api_key": "abc123", "note": SECRET}, provider="slack", channel="slack",
        chat_id="C1", thread_id="17.2", source="agent", event_id="e-1"))
    assert record is not None
    [line] = (tmp_path / "runtime" / "events" / "events.jsonl").read_text().splitlines()
    stored = json.loads(line)
    assert set(stored) == {"event_id", "run_id", "task_id", "agent_id", "phase", "summary",
                           "payload", "provider", "channel", "chat_id", "thread_id", "source",
                           "detail_file", "at"}
    assert SECRET not in line and "abc123" not in line
    assert stored["summary"] == "using [REDACTED]"
    live = await subscription.next(1)
    assert live is not None and live.kind == "workflow" and live.data == stored
    assert SECRET not in json.dumps(hub.recent())


async def test_duplicates_are_dropped_even_after_a_restart(tmp_path: Path) -> None:
    events = service(tmp_path)
    assert await events.append(WorkflowEvent("done", "x", event_id="same")) is not None
    assert await events.append(WorkflowEvent("done", "x", event_id="same")) is None
    await events.close()
    index = json.loads((tmp_path / "runtime/events/index.json").read_text())
    assert index == {"version": 1, "ids": ["same"]}
    again = service(tmp_path)
    assert await again.append(WorkflowEvent("done", "x", event_id="same")) is None
    # index.json lost (crash between the two writes): the journal's tail still knows the id
    (tmp_path / "runtime/events/index.json").unlink()
    third = service(tmp_path)
    assert third.seen("same")
    lines = (tmp_path / "runtime/events/events.jsonl").read_text().splitlines()
    assert len(lines) == 1


def test_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="phase must be one of"):
        WorkflowEvent("finished", "x")


async def test_the_journal_rotates_at_its_cap_and_recent_reads_across_the_two_files(
        tmp_path: Path) -> None:
    directory = tmp_path / "runtime" / "events"
    log = FileWorkflowLog(directory, rotate_bytes=2_000)
    for n in range(60):
        assert await log.record({"event_id": f"e{n}", "phase": "progress", "summary": "x" * 40})
    files = sorted(p.name for p in directory.glob("*.jsonl"))
    assert files == ["events.1.jsonl", "events.jsonl"]
    assert all(p.stat().st_size < 2_000 + 200 for p in directory.glob("*.jsonl"))
    newest = [r["event_id"] for r in log.recent(20)]
    assert newest == [f"e{n}" for n in range(40, 60)]  # spans both files, in order
    await log.close()
    again = FileWorkflowLog(directory, rotate_bytes=2_000)
    assert again.seen("e0") and again.seen("e59")  # the dedupe index outlives rotations
    assert not await again.record({"event_id": "e59", "phase": "done", "summary": "x"})
    await again.close()
