"""CLI errors are one sentence; the dashboard is loopback, token-protected and streams events."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.e2e.harness import TRACEBACK, base_env, wait_for


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`soulflow <args>`, whose output must hold no traceback (as every daemon's log)."""
    result = subprocess.run([sys.executable, "-m", "soulflow", *args], env=env,
                            capture_output=True, text=True, timeout=60)
    assert not TRACEBACK.search(result.stdout + result.stderr), result.stdout + result.stderr
    return result


def assert_one_sentence_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]  # earlier lines are the daemon's log
    assert last_line.startswith("soulflow: error: ") and fragment in last_line


def test_init_scaffolds_a_workspace(tmp_path: Path) -> None:
    target = tmp_path / "new"
    result = run_cli("init", str(target), env=base_env(tmp_path))
    assert result.returncode == 0, result.stderr
    for relative in (".env.example", "templates/AGENTS.md", "memory/MEMORY.md", "HEARTBEAT.md",
                     "runtime/sessions"):
        assert (target / relative).exists(), relative
    (target / "memory" / "MEMORY.md").write_text("mine")
    run_cli("init", str(target), env=base_env(tmp_path))
    assert (target / "memory" / "MEMORY.md").read_text() == "mine"  # never overwritten


def test_user_errors_are_one_sentence_without_traceback(tmp_path: Path) -> None:
    missing = base_env(tmp_path / "does-not-exist")
    assert_one_sentence_error(run_cli("run", env=missing), "does not exist; create it with")
    tmp_path.joinpath("ws").mkdir()
    bad = base_env(tmp_path / "ws", DASHBOARD_PORT="eighty")
    assert_one_sentence_error(run_cli("run", env=bad), "DASHBOARD_PORT must be an integer")
    exposed = base_env(tmp_path / "ws", DASHBOARD_HOST="0.0.0.0")
    assert_one_sentence_error(run_cli("run", env=exposed), "DASHBOARD_TOKEN must be set")
    idle = base_env(tmp_path / "ws")
    assert_one_sentence_error(run_cli("status", env=idle), "SoulFlow is not running")
    for command in ("run", "chat", "status", "dlq", "init"):
        assert run_cli(command, "--help", env=idle).returncode == 0


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        tmp_path.joinpath("ws").mkdir()
        result = run_cli("run", env=base_env(tmp_path / "ws", DASHBOARD_PORT=str(port)))
    assert_one_sentence_error(result, f"cannot listen on 127.0.0.1:{port}")


def test_second_daemon_on_one_workspace_is_refused(make_daemon) -> None:
    daemon = make_daemon().start()
    result = run_cli("run", env=daemon.env)
    assert_one_sentence_error(result, "already running in this workspace")
    assert daemon.alive()


def test_dashboard_token_and_endpoints(make_daemon) -> None:
    daemon = make_daemon(DASHBOARD_TOKEN="s3cret-token-value").start()
    assert httpx.get(daemon.url + "/healthz").json()["status"] == "ok"
    page = httpx.get(daemon.url + "/")
    assert page.status_code == 200 and "Local chat" in page.text
    denied = httpx.get(daemon.url + "/api/state")
    assert denied.status_code == 401 and "Bearer" in denied.json()["error"]
    wrong = httpx.get(daemon.url + "/api/state", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    state = daemon.state()
    assert set(state["queues"]) >= {"inbound_pending", "outbox_pending", "dlq"}
    assert state["channels"][0]["name"] == "local"
    assert daemon.cli("status").returncode == 0  # the CLI sends the token from the settings
    assert daemon.url.startswith("http://127.0.0.1:")


def test_sse_stream_carries_live_events(make_daemon) -> None:
    daemon = make_daemon().start()
    seen: list[dict] = []
    got_reply = threading.Event()

    def listen() -> None:
        with httpx.stream("GET", daemon.url + "/api/events", timeout=30) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["kind"] == "outbound.sent":
                        got_reply.set()
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    wait_for(lambda: daemon.state()["ok"], what="state")
    daemon.wait_reply(daemon.say("stream me"))
    assert got_reply.wait(20)
    kinds = [e["kind"] for e in seen]
    assert "inbound.received" in kinds and "agent.reply" in kinds and "outbound.sent" in kinds


def test_a_cross_site_form_or_rebinding_page_gets_nothing_and_the_cli_still_works(
        make_daemon) -> None:
    """Issue 8: an HTML form on any site POSTed `/repl …` as text/plain to /api/chat and the
    daemon ran it. Now the browser's form is refused (Origin, then content type), a
    rebinding page's Host is refused, and nothing is journaled; the CLI is unaffected."""
    daemon = make_daemon().start()
    port = daemon.url.rsplit(":", 1)[1]
    attempts = [
        ({"Content-Type": "text/plain", "Origin": "http://evil.example",
          "Sec-Fetch-Site": "cross-site"}, '{"chat_id": "default", "text": "/repl print(6*7)"}'),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "text=%2Frepl+print%286*7%29"),
        ({"Content-Type": "text/plain"}, '{"chat_id": "default", "text": "/repl print(6*7)"}'),
    ]
    for headers, body in attempts:
        response = httpx.post(daemon.url + "/api/chat", headers=headers, content=body)
        assert response.status_code in (403, 415), response.text
    rebinding = {"Host": f"evil.example:{port}"}
    assert httpx.get(daemon.url + "/api/state", headers=rebinding).status_code == 403
    assert httpx.get(daemon.url + "/api/chat/default/messages",
                     headers=rebinding).status_code == 403
    assert daemon.transcript("default") == []
    assert daemon.state()["queues"]["inbound_pending"] == 0
    assert daemon.wait_reply(daemon.say("hello after the attack"))  # the page's own JSON works
    chat = daemon.cli("chat", "--chat-id", "cli", input=b"from the terminal\n")
    assert chat.returncode == 0 and b"from the terminal" in chat.stdout, chat.stderr
    assert daemon.cli("status").returncode == 0
    assert daemon.cli("dlq", "list").returncode == 0
    assert daemon.cli("dlq", "purge").returncode == 0
    assert "42" not in json.dumps(daemon.transcript("default"))


def test_a_wildcard_bind_answers_only_its_names_and_the_cli(make_daemon) -> None:
    """DASHBOARD_HOST=0.0.0.0 (token required): the CLI calls it on loopback; a Host that is
    neither loopback, the bound address nor in DASHBOARD_ALLOWED_HOSTS gets 403 even with the
    right token."""
    token = "wildcard-token-value"
    daemon = make_daemon(DASHBOARD_HOST="0.0.0.0", DASHBOARD_TOKEN=token,
                         DASHBOARD_ALLOWED_HOSTS="dash.example").start()
    port = daemon.url.rsplit(":", 1)[1]
    auth = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}"
    for host, status in ((f"dash.example:{port}", 200), ("dash.example", 200),
                         (f"192.0.2.10:{port}", 403), (f"evil.example:{port}", 403)):
        response = httpx.get(base + "/api/state", headers={**auth, "Host": host})
        assert response.status_code == status, (host, response.text)
    assert daemon.cli("status").returncode == 0
    assert daemon.cli("dlq", "list").returncode == 0
