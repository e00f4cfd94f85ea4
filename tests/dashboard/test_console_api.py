"""The console's read side against a real daemon: auth on every endpoint, /api/state's
sections, /metrics in the Prometheus text format, the SSE stream's replay, no secret out."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboard.conftest import PLANTED, TOKEN
from tests.e2e.harness import Daemon, wait_for

CONSOLE_POSTS = ("/api/approvals/decide", "/api/runs/cancel", "/api/tasks/cancel",
                 "/api/dlq/replay", "/api/dlq/purge", "/api/cron/disable")
CONSOLE_GETS = ("/api/state", "/metrics", "/api/dlq", "/api/cron", "/api/events")


def _raw(daemon: Daemon, method: str, path: str, headers: dict[str, str],
         **kwargs: Any) -> httpx.Response:
    """A request with exactly these headers (no token added), streams closed at once."""
    with httpx.Client(timeout=10) as client, \
            client.stream(method, daemon.url + path, headers=headers, **kwargs) as response:
        return response


def test_every_console_endpoint_needs_the_token_and_refuses_other_sites(make_daemon) -> None:
    daemon = make_daemon().start()
    body = {"json": {"run_id": "r_x"}}
    for path in CONSOLE_GETS:
        assert _raw(daemon, "GET", path, {}).status_code == 401, path
        assert _raw(daemon, "GET", path, {"Authorization": "Bearer wrong"}).status_code == 401
        foreign = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
        assert _raw(daemon, "GET", path, foreign).status_code == 403, path
    for path in CONSOLE_POSTS:
        assert _raw(daemon, "POST", path, {}, **body).status_code == 401, path
        assert _raw(daemon, "POST", path, {"Authorization": "Bearer nope"},
                    **body).status_code == 401
        cross = {"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "cross-site"}
        assert _raw(daemon, "POST", path, cross, **body).status_code == 403, path
        as_form = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/plain"}
        assert _raw(daemon, "POST", path, as_form, content=b"{}").status_code == 415, path
    # the page and its files hold no data: served without the token, with a strict CSP
    page = _raw(daemon, "GET", "/", {})
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("app.js", "api.js", "events.js", "chart.js", "render.js", "usage.js",
                  "app.css"):
        response = daemon._http.get(f"{daemon.url}/static/{asset}")
        assert response.status_code == 200, asset
    # only the listed files: anything else under /static/ is an ordinary guarded path
    assert _raw(daemon, "GET", "/static/index.html", {}).status_code == 401
    assert daemon.api("GET", "/static/console.py").status_code == 404


def test_state_has_every_console_section(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    daemon.wait_reply(daemon.say("hello"))
    state = daemon.state()
    for section in ("channels", "queues", "runs", "approvals", "task_list", "cron_jobs",
                    "recent_messages", "decisions", "workflow_events", "dlq", "providers",
                    "sandbox", "traffic", "usage"):
        assert section in state, section
    local = next(c for c in state["channels"] if c["name"] == "local")
    assert local["status"] == "connected" and local["last_send_at"]
    provider = state["providers"][0]
    assert provider["name"] == "phi4_local" and provider["default"] is True
    assert provider["calls"] == 1 and provider["healthy"] and provider["latency"]["samples"] == 1
    minutes = state["traffic"]["channels"]["local"]
    assert len(minutes["in"]) == 60 and sum(minutes["in"]) == 1 and sum(minutes["out"]) == 1


def test_metrics_parse_and_count(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    daemon.wait_reply(daemon.say("count me"))
    fake_llm.script_error(400)  # the next model call fails for good: a provider error
    daemon.wait_reply(daemon.say("this one fails"), timeout=30)
    response = daemon.api("GET", "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    expected = {"soulflow_messages_received", "soulflow_messages_sent", "soulflow_send_failures",
                "soulflow_send_retries", "soulflow_dlq_entries", "soulflow_queue_depth",
                "soulflow_run_duration_seconds", "soulflow_provider_requests",
                "soulflow_provider_errors", "soulflow_provider_latency_seconds",
                "soulflow_open_connections", "soulflow_asyncio_tasks", "soulflow_channel_up",
                "soulflow_dashboard_connections", "soulflow_dashboard_connections_closed"}
    assert expected <= set(families)

    def value(family: str, sample: str, **labels: str) -> float:
        return next(s.value for s in families[family].samples
                    if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("soulflow_messages_received", "soulflow_messages_received_total",
                 channel="local") == 2
    assert value("soulflow_messages_sent", "soulflow_messages_sent_total", channel="local") == 2
    assert value("soulflow_run_duration_seconds", "soulflow_run_duration_seconds_count") == 2
    assert value("soulflow_provider_requests", "soulflow_provider_requests_total",
                 provider="phi4_local") >= 2
    assert sum(s.value for s in families["soulflow_provider_errors"].samples) >= 1
    assert value("soulflow_open_connections", "soulflow_open_connections") >= 1
    turns = {o: value("soulflow_turns", "soulflow_turns_total", outcome=o)
             for o in ("answered", "max_turns", "failed")}
    assert turns == {"answered": 1, "max_turns": 0, "failed": 1}
    assert value("soulflow_asyncio_tasks", "soulflow_asyncio_tasks") >= 1
    assert value("soulflow_dashboard_connections", "soulflow_dashboard_connections") >= 1
    assert value("soulflow_dashboard_connections_closed",
                 "soulflow_dashboard_connections_closed_total", reason="refused") == 0


def _read_events(daemon: Daemon, headers: dict[str, str], until: Any,
                 timeout: float = 10.0) -> list[dict[str, Any]]:
    """SSE frames ({"id", "event", "data"}) until `until(frames)` holds."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=timeout) as client, client.stream(
            "GET", daemon.url + "/api/events", headers={**daemon.headers, **headers}) as stream:
        frame: dict[str, Any] = {}
        for line in stream.iter_lines():
            if line.startswith("id: "):
                frame["id"] = line[4:]
            elif line.startswith("event: "):
                frame["event"] = line[7:]
            elif line.startswith("data: "):
                frame["data"] = json.loads(line[6:])
            elif not line and frame:
                frames.append(frame)
                frame = {}
                if until(frames):
                    return frames
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"the stream did not deliver what was expected: {frames}")


def test_events_replay_after_last_event_id(make_daemon) -> None:
    daemon = make_daemon().start()
    daemon.wait_reply(daemon.say("first"))

    def has_reply(frames: list[dict[str, Any]]) -> bool:  # delivered: the turn's last event
        return any(f.get("event") == "outbound.sent" for f in frames)

    first = _read_events(daemon, {}, has_reply)
    assert first[0]["event"] == "hello" and first[0]["data"]["data"]["gap"] is False
    last_id = [f for f in first if "id" in f][-1]["id"]
    daemon.wait_reply(daemon.say("second"))
    again = _read_events(daemon, {"Last-Event-ID": last_id}, has_reply)
    replayed = [f for f in again if f.get("event") not in ("hello", None)]
    assert all(int(f["id"].split(".")[1]) > int(last_id.split(".")[1]) for f in replayed)
    assert any("second" in json.dumps(f["data"]) for f in replayed)
    assert not any("first" in json.dumps(f["data"]) for f in replayed)
    # an id from another process (the daemon restarted): the whole ring, flagged as a gap
    stale = _read_events(daemon, {"Last-Event-ID": "0000.5"}, has_reply)
    assert stale[0]["data"]["data"]["gap"] is True


@pytest.mark.timeout(90)
def test_a_planted_secret_never_leaves_the_daemon(make_daemon, fake_llm) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "stuck.jsonl"
    blocker.mkdir(parents=True)  # replies to chat "stuck" die: a dead letter with the secret
    daemon.start()
    daemon.say(f"my key is {PLANTED}", chat_id="stuck")
    wait_for(lambda: daemon.state()["queues"]["dlq"] == 1, what="a dead letter")
    fake_llm.script_tool_call("write_file", {"path": "x/key.txt", "content": PLANTED})
    daemon.say(f"save {PLANTED} please", chat_id="leaky")
    wait_for(lambda: daemon.state()["approvals"], what="the approval")
    answers = [daemon.api("GET", path) for path in
               ("/api/state", "/metrics", "/api/dlq", "/api/dlq?inbound=1", "/api/cron",
                "/api/chat/leaky/messages?after=-1")]
    events = _read_events(daemon, {}, lambda frames: len(frames) > 3)
    run = daemon.state()["approvals"][0]
    answers.append(daemon.api("POST", "/api/approvals/decide", json={
        "run_id": run["run_id"], "approval_id": run["approval_id"], "decision": "deny"}))
    for response in answers:
        assert response.status_code == 200, response.text
        assert PLANTED not in response.text, response.request.url
    assert PLANTED not in json.dumps(events)
    assert "[REDACTED" in daemon.api("GET", "/api/state").text
