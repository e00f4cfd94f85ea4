"""FileTaskStore: atomic versioned checkpoints, corrupt files moved aside and reported, detail
logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soulflow.backends import base as store_module
from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import NodeKind, TaskGraph, TaskNode, TaskState, TaskStatus
from soulflow.tasks.answers import require


def temp_files(directory: Path) -> list[Path]:
    return list(directory.glob(".store.json.*"))


def graph() -> TaskGraph:
    return TaskGraph([TaskNode(id="a", kind=NodeKind.TOOL, tool="read_file")])


async def test_checkpoint_roundtrip_and_version(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    task = TaskState("t-1", "one", graph(), provider="telegram", chat_id="42")
    await store.add(task)
    data = json.loads(store.path.read_text())
    assert data["version"] == 1 and list(data["tasks"]) == ["t-1"]
    assert data["tasks"]["t-1"]["revision"] == 1
    again = FileTaskStore(tmp_path).get("t-1")
    assert again is not None and again.to_dict() == task.to_dict()
    assert [t.task_id for t in store.list(chat_id="42")] == ["t-1"]
    assert store.list(status=TaskStatus.COMPLETED) == []
    assert temp_files(tmp_path) == []  # no temp file left behind
    with pytest.raises(ValueError, match="already exists"):
        await store.add(TaskState("t-1", "dup", graph()))
    with pytest.raises(ValueError, match="bad task id"):
        await store.add(TaskState("../evil", "x", graph()))


@pytest.mark.parametrize("content", [b"{not json", b"", b'{"version": 99, "tasks": {}}',
                                     b'["a list"]'])
def test_unreadable_store_is_moved_aside_and_reported(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "store.json").write_bytes(content)
    store = FileTaskStore(tmp_path)
    assert store.list() == []
    [moved] = list(tmp_path.glob("store.json.corrupt-*"))
    assert moved.read_bytes() == content  # the user's data is kept, byte for byte
    assert not (tmp_path / "store.json").exists()
    [problem] = store.problems
    assert "moved aside to store.json.corrupt-" in problem


async def test_one_unreadable_task_is_kept_untouched(tmp_path: Path) -> None:
    good = TaskState("t-ok", "fine", graph()).to_dict()
    bad = {"task_id": "t-bad", "graph": {"nodes": [{"id": "a", "kind": "teleport"}]}}
    (tmp_path / "store.json").write_text(json.dumps(
        {"version": 1, "tasks": {"t-ok": good, "t-bad": bad}}))
    store = FileTaskStore(tmp_path)
    assert [t.task_id for t in store.list()] == ["t-ok"]
    assert "t-bad could not be read" in store.problems[0]
    await store.checkpoint(require(store, "t-ok"))
    assert json.loads(store.path.read_text())["tasks"]["t-bad"] == bad


async def test_finished_tasks_are_pruned_beyond_the_limit(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "KEEP_FINISHED", 2)
    store = FileTaskStore(tmp_path)
    for i in range(4):
        task = TaskState(f"t-{i}", str(i), graph(), status=TaskStatus.COMPLETED)
        await store.add(task)
    waiting = TaskState("t-w", "w", graph(), status=TaskStatus.WAITING_APPROVAL)
    await store.add(waiting)
    assert sorted(json.loads(store.path.read_text())["tasks"]) == ["t-2", "t-3", "t-w"]


async def test_detail_log_is_a_readable_story(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    await store.add(TaskState("t-s", "Compare vendors", graph()))
    await store.append_detail("t-s", "**assign** a: started")
    path = await store.append_detail("t-s", "**done** a: completed")
    text = path.read_text()
    assert path == tmp_path / "details" / "t-s.md"
    assert text.startswith("# Task t-s: Compare vendors\n\n- ")
    assert text.count("\n- ") == 2 and text.endswith("**done** a: completed\n")
    with pytest.raises(ValueError):
        store.detail_path("../../etc/passwd")
