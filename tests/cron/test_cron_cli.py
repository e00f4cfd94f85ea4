"""`soulflow cron` against a stopped daemon (the store, under the lock) and a running one
(its API), with `soulflow run` as a real subprocess and the fake model; plus the API's guard
and the quiet `system_event` jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Daemon, base_env, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Daemon]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=fake_llm.base_url,
                   PHI4_MODEL="fake-model", HEARTBEAT_INTERVAL="0")
    built = Daemon(workspace, env, tmp_path / "daemon.log")
    yield built
    built.close()


def cron(daemon: Daemon, *args: str, ok: bool = True) -> str:
    done = daemon.cli("cron", *args)
    output = done.stdout.decode() + done.stderr.decode()
    assert (done.returncode == 0) is ok, output
    return output


def jobs(daemon: Daemon) -> list[dict[str, Any]]:
    return json.loads(cron(daemon, "list", "--json"))["jobs"]


def test_cron_on_a_stopped_daemon_edits_the_store(daemon: Daemon) -> None:
    out = cron(daemon, "add", "--chat", "local:ops", "--every", "1h", "--name", "disk",
               "--kind", "system_event", "Check", "the", "disk")
    assert out.startswith("Added job job_")
    [job] = jobs(daemon)
    assert job["payload"] == {"kind": "system_event", "text": "Check the disk",
                              "chat": {"provider": "local", "chat_id": "ops",
                                       "thread_id": None}}
    assert job["schedule"] == {"kind": "every", "every_s": 3600, "tz": "UTC"}
    job_id = job["id"]
    cron(daemon, "disable", job_id)
    assert jobs(daemon)[0]["enabled"] is False
    assert "is disabled; enable it first" in cron(daemon, "run", job_id, ok=False)
    cron(daemon, "enable", job_id)
    assert "fires when the daemon starts" in cron(daemon, "run", job_id)
    assert "no 'slack' channel" in cron(daemon, "add", "--chat", "slack:C1", "--every", "1h",
                                        "hi", ok=False)
    assert "not a duration" in cron(daemon, "add", "--chat", "local:x", "--every", "soon",
                                    "hi", ok=False)
    assert "no cron job 'job_nope'" in cron(daemon, "rm", "job_nope", ok=False)
    stored = json.loads((daemon.workspace / "runtime" / "cron" / "cron-store.json").read_text())
    assert list(stored["jobs"]) == [job_id]
    cron(daemon, "rm", job_id)
    assert "No cron jobs." in cron(daemon, "list")


def test_cron_through_a_running_daemon(daemon: Daemon, fake_llm: FakeOpenAIThread) -> None:
    daemon.start()
    # a job added while the daemon runs goes through its API (the store belongs to it)
    cron(daemon, "add", "--chat", "local:ops", "--cron", "0 9 * * 1-5", "--tz",
         "Europe/Berlin", "--name", "standup", "Post the standup reminder.")
    cron(daemon, "add", "--chat", "local:ops", "--every", "1d", "--name", "disk",
         "--kind", "system_event", "Check the disk.")
    by_name = {job["name"]: job for job in jobs(daemon)}
    assert daemon.state()["cron"]["jobs"] == 2

    # agent_turn: fired now, answered in its chat like a message
    cron(daemon, "run", by_name["standup"]["id"])
    wait_for(lambda: any("echo: Post the standup reminder." in m["content"]
                         for m in daemon.replies("ops")), what="the standup reply")

    # system_event answered HEARTBEAT_OK: nothing is posted
    fake_llm.script_reply("HEARTBEAT_OK")
    quiet_id = by_name["disk"]["id"]
    session = daemon.workspace / "runtime" / "sessions" / f"cron%3A{quiet_id}.jsonl"
    cron(daemon, "run", quiet_id)

    def answered(count: int) -> bool:
        if not session.exists():
            return False
        lines = [json.loads(line) for line in session.read_text().splitlines()]
        return sum(1 for r in lines if r.get("role") == "assistant") >= count

    wait_for(lambda: answered(1), what="the quiet turn's answer")
    assert not any("[cron: disk]" in m["content"] for m in daemon.replies("ops"))
    # anything else is posted, marked with the job
    fake_llm.script_reply("The disk is 97% full.")
    cron(daemon, "run", quiet_id)
    wait_for(lambda: any(m["content"] == "[cron: disk] The disk is 97% full."
                         for m in daemon.replies("ops")), what="the quiet turn's notice")
    listed = {job["name"]: job for job in jobs(daemon)}
    assert listed["disk"]["state"]["runs"] == 2 and listed["disk"]["enabled"]

    cron(daemon, "disable", quiet_id)
    cron(daemon, "rm", by_name["standup"]["id"])
    assert [(j["name"], j["enabled"]) for j in jobs(daemon)] == [("disk", False)]
    state = daemon.state()
    assert state["ops"]["ticks"] >= 0 and state["heartbeat"]["enabled"] is False

    daemon.stop()
    # and the same store is there for the offline CLI
    assert [(j["name"], j["enabled"]) for j in jobs(daemon)] == [("disk", False)]


def test_the_cron_api_keeps_the_dashboard_guard(daemon: Daemon) -> None:
    daemon.start()
    body = {"chat": "local:ops", "text": "hi", "schedule": {"kind": "every", "every_s": 60}}
    form = daemon.api("POST", "/api/cron/add", content=json.dumps(body),
                      headers={"Content-Type": "text/plain"})
    assert form.status_code == 415
    foreign = daemon.api("POST", "/api/cron/add", json=body,
                         headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    rebinding = daemon.api("GET", "/api/cron", headers={"Host": "evil.example"})
    assert rebinding.status_code == 403
    assert daemon.api("GET", "/api/cron").json() == {"ok": True, "jobs": []}
    bad = daemon.api("POST", "/api/cron/add", json={**body, "schedule": {"kind": "hourly"}})
    assert bad.status_code == 400 and "kind must be one of" in bad.json()["error"]
    assert daemon.api("POST", "/api/cron/explode", json={}).status_code == 404
    assert daemon.api("POST", "/api/cron/add", json=body).status_code == 200
