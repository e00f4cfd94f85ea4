"""kill -9 at every node boundary and mid-node, restart: every side effect happens exactly once.

`crash_runner.py` runs a 4-node graph (a -> b, c in parallel -> d) whose nodes append their
name to effects.txt; `append` nodes are not idempotent, `put` (node c) is. The runner SIGKILLs
itself at the requested point; the test restarts it until the task is done, answering for
interrupted nodes the way a user who looks at the effect would (`mark_done` if it happened,
else `retry`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("a", "b", "c", "d")
NOT_IDEMPOTENT = {"a", "b", "d"}


def run(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.tasks.crash_runner", str(workspace),
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def effects(workspace: Path) -> Counter[str]:
    path = workspace / "effects.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def final_state(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kill", [f"{when}:{node}" for when in ("after", "inside", "before")
                                  for node in NODES])
def test_restart_finishes_with_each_side_effect_once(tmp_path: Path, kill: str) -> None:
    killed = run(tmp_path, "--kill", kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    when, node = kill.split(":")

    state = final_state(run(tmp_path))
    if when != "after" and node in NOT_IDEMPOTENT:
        # cut off mid-flight and not safe to repeat: reported, not silently re-run
        assert state["status"] == "waiting_approval"
        assert {"node_id": node, "reason": "interrupted"}.items() <= state["waiting"][0].items()
        assert effects(tmp_path)[node] == (1 if when == "inside" else 0)
    rounds = 0
    while state["status"] != "completed":
        assert state["status"] == "waiting_approval", state
        assert all(w["reason"] == "interrupted" for w in state["waiting"])
        done = effects(tmp_path)
        decisions = [f"{w['node_id']}:{'mark_done' if done[w['node_id']] else 'retry'}"
                     for w in state["waiting"]]
        state = final_state(run(tmp_path, *[arg for d in decisions for arg in ("--decide", d)]))
        rounds += 1
        assert rounds <= 2
    assert state["nodes"] == dict.fromkeys(NODES, "completed")
    assert effects(tmp_path) == Counter(NODES)

    records = [json.loads(line) for line in
               (tmp_path / "runtime/events/events.jsonl").read_text().splitlines()]
    ids = [r["event_id"] for r in records]
    assert len(ids) == len(set(ids))
    assert records[-1]["phase"] == "done" and records[-1]["payload"]["status"] == "completed"


def test_approval_given_after_a_restart_continues_the_task(tmp_path: Path) -> None:
    first = final_state(run(tmp_path, "--gate"))
    assert first["status"] == "waiting_approval"
    assert first["waiting"] == [{"node_id": "ok", "reason": "approval", "prompt": "Run d?"}]
    restarted = final_state(run(tmp_path, "--gate"))  # a new process: still waiting
    assert restarted["status"] == "waiting_approval"
    assert effects(tmp_path) == Counter("abc")
    done = final_state(run(tmp_path, "--gate", "--decide", "ok:approve"))
    assert done["status"] == "completed"
    assert effects(tmp_path) == Counter("abcd")
