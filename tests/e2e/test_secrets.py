"""Secrets never at rest in plaintext, yet a tool the user asked to use one gets the value."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.security.samples import JWT, OPENAI_KEY, PEM, VISA_TEST_CARD

PASSWORD = "Hunter2-Correct-Horse"
REF = re.compile(r"\{\{secret:([A-Za-z0-9_.\-]+)\}\}")


class Recorder(BaseHTTPRequestHandler):
    received: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        Recorder.received.extend(parse_qs(urlparse(self.path).query).get("pw", []))
        body = b"welcome"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def login_server() -> Iterator[str]:
    """Stands in for a site the user asks the agent to log in to (records what it got)."""
    Recorder.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def plaintexts() -> list[str]:
    card_digits = VISA_TEST_CARD.replace(" ", "")
    return [PASSWORD, OPENAI_KEY, JWT, "MIIEowIBAAKCAQEAT3stOnlyNotRealKeyMaterial", VISA_TEST_CARD,
            card_digits]


def files_containing(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path}: {n[:12]}…" for n in needles if n.encode() in data]
    return hits


def test_canary_secrets_are_sealed_everywhere_but_reach_the_tool(make_daemon, fake_llm,
                                                                  login_server: str) -> None:
    daemon = make_daemon(WEB_FETCH_ALLOWED_HOSTS="127.0.0.1").start()
    first = daemon.say(f"my login password={PASSWORD}\nkey {OPENAI_KEY}\ntoken {JWT}\n"
                       f"{PEM}\ncard: {VISA_TEST_CARD}")
    echo = daemon.wait_reply(first)["content"]
    refs = REF.findall(echo)
    assert len(refs) >= 5, echo
    password_ref = next(r for r in refs if ".password." in r)

    fake_llm.script_tool_call("web_fetch", {
        "url": f"{login_server}/login?pw={{{{secret:{password_ref}}}}}"})
    fake_llm.script_reply("Logged in.")
    second = daemon.say("log in with my password")
    assert daemon.wait_reply(second)["content"] == "Logged in."
    assert Recorder.received == [PASSWORD]  # the tool got the real value

    daemon.api("GET", "/api/state")
    responses = [daemon.api("GET", "/api/state").text,
                 daemon.api("GET", "/api/chat/test/messages").text,
                 json.dumps([r.json for r in fake_llm.requests])]
    daemon.stop()
    secrets = plaintexts()
    assert files_containing(daemon.workspace, secrets) == []
    log = daemon.log()
    assert [s[:12] for s in secrets if s in log] == []
    for text in responses:
        assert [s[:12] for s in secrets if s in text] == []


def test_missing_tampered_and_wrong_key_get_the_template(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    missing = daemon.say("use {{secret:deploy_token}} please")
    reply = daemon.wait_reply(missing)["content"]
    assert "deploy_token" in reply and "/secret set deploy_token" in reply
    seen_by_model = len(fake_llm.requests)

    echo = daemon.wait_reply(daemon.say(f"password={PASSWORD}"))["content"]
    name = REF.findall(echo)[0]
    tampered = daemon.say(f"use {{{{secret:{name}:sv1.AAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBB}}}}")
    assert "secret" in daemon.wait_reply(tampered)["content"].lower()
    assert len(fake_llm.requests) == seen_by_model + 1  # only the echo reached the model

    daemon.stop()
    key = daemon.workspace / "runtime" / "security" / "master.key"
    key.write_bytes(bytes(32))  # a different key: stored ciphertexts no longer open
    daemon.start()
    wrong = daemon.say(f"log in with {{{{secret:{name}}}}}")
    assert "secret" in daemon.wait_reply(wrong)["content"].lower()
    assert daemon.alive()


def test_secret_command_and_cli(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    set_reply = daemon.wait_reply(daemon.say("/secret set github_token ghp-not-a-real-value-42"))
    assert "Stored secret github_token" in set_reply["content"]
    listed = daemon.wait_reply(daemon.say("/secret list"))["content"]
    assert "github_token" in listed and "ghp-not-a-real" not in listed
    cli = daemon.cli("secret", "list")
    assert cli.returncode == 0 and b"github_token" in cli.stdout
    stored = daemon.cli("secret", "set", "db_password", input=b"s3cr3t-db-pass\n")
    assert stored.returncode == 0 and b"Stored db_password" in stored.stdout
    assert daemon.cli("secret", "rm", "db_password").returncode == 0
    assert daemon.cli("secret", "rm", "db_password").returncode == 1
    rotated = daemon.cli("secret", "rotate-key")
    assert rotated.returncode == 0 and b"re-encrypted" in rotated.stdout
    daemon.stop()
    assert files_containing(daemon.workspace, ["ghp-not-a-real-value-42", "s3cr3t-db-pass"]) == []
    key = daemon.workspace / "runtime" / "security" / "master.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.parent.stat().st_mode & 0o777 == 0o700
