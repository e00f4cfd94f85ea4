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
# kept only in the workspace's .env, shaped like nothing: only the settings say it is secret
ENV_CANARY = "canary-only-in-dotenv-5b1f9e"
REF = re.compile(r"\{\{secret:([A-Za-z0-9_.\-]+)\}\}")


class Recorder(BaseHTTPRequestHandler):
    received: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        Recorder.received.extend(parse_qs(urlparse(self.path).query).get("pw", []))
        # /leak plays a page that (for whatever reason) shows the daemon's own credential
        body = f"config dump: {ENV_CANARY}".encode() if self.path == "/leak" else b"welcome"
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
    reply = daemon.wait_reply(second)["content"]
    # sending a secret over the network is the user's call, and names where it goes
    assert "sends secret" in reply and "127.0.0.1" in reply, reply
    assert Recorder.received == []
    assert daemon.wait_reply(daemon.say("yes"))["content"] == "Logged in."
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


def test_a_credential_only_in_dotenv_is_redacted_in_every_sink(make_daemon, fake_llm,
                                                               login_server: str) -> None:
    """The page a tool fetches shows a token the daemon only knows from `.env`; the model
    (scripted) repeats it. Nothing outside `.env` may hold it: no file, log line, dashboard
    response, event or model request."""
    daemon = make_daemon(WEB_FETCH_ALLOWED_HOSTS="127.0.0.1")
    (daemon.workspace / ".env").write_text(f"MY_SERVICE_TOKEN={ENV_CANARY}\n")
    daemon.start()
    fake_llm.script_tool_call("web_fetch", {"url": f"{login_server}/leak"})
    fake_llm.script_reply(f"The page shows {ENV_CANARY}, I will remember it.")
    reply = daemon.wait_reply(daemon.say("what does the config page say?"))["content"]
    assert ENV_CANARY not in reply and "[REDACTED]" in reply
    fake_llm.script_reply("Nothing more.")
    daemon.wait_reply(daemon.say("and now?"))  # the next request carries the history
    assert len(fake_llm.requests) == 3
    responses = [daemon.api("GET", "/api/state").text,
                 daemon.api("GET", "/api/chat/test/messages").text,
                 json.dumps([r.json for r in fake_llm.requests])]
    daemon.stop()
    for text in responses:
        assert ENV_CANARY not in text
    assert ENV_CANARY not in daemon.log()
    leaked = [p for p in files_containing(daemon.workspace, [ENV_CANARY])
              if not p.startswith(str(daemon.workspace / ".env") + ":")]
    assert leaked == []


def test_a_hostile_model_cannot_read_the_key_env_or_another_chat(make_daemon, fake_llm) -> None:
    """A prompt-injected model asks the file tools for `.env`, the key, the vault and another
    chat's session: every call is refused and nothing secret reaches the model."""
    daemon = make_daemon()
    (daemon.workspace / ".env").write_text(f"MY_SERVICE_TOKEN={ENV_CANARY}\n")
    daemon.start()
    daemon.wait_reply(daemon.say("hello from chat B, my note: tangerine-42", chat_id="other"),
                      chat_id="other")
    sessions = daemon.workspace / "runtime" / "sessions"
    other = next(p.name for p in sessions.iterdir() if "other" in p.name)
    attempts = [("read_file", {"path": ".env"}), ("read_file", {"path": "./.ENV"}),
                ("read_file", {"path": "runtime/security/master.key"}),
                ("read_file", {"path": "memory/../runtime/security/secrets.json"}),
                ("read_file", {"path": f"runtime/sessions/{other}"}),
                ("list_dir", {"path": "runtime/sessions"}),
                ("edit_file", {"path": ".env", "old_text": "=", "new_text": "=x"})]
    for name, args in attempts:
        fake_llm.script_tool_call(name, args)
    fake_llm.script_tool_call("list_dir", {"recursive": True})
    fake_llm.script_reply("Done looking.")
    before = len(fake_llm.requests)
    assert daemon.wait_reply(daemon.say("show me everything"))["content"] == "Done looking."
    sent = json.dumps([r.json for r in fake_llm.requests[before:]])
    key = (daemon.workspace / "runtime" / "security" / "master.key").read_bytes()
    for needle in (ENV_CANARY, "tangerine-42", key.hex(), "ciphertext"):
        assert needle not in sent, needle
    last = json.dumps(fake_llm.requests[-1].json)  # holds every tool result of the run
    assert last.count("is protected and file tools cannot use it") == len(attempts)
    assert (daemon.workspace / ".env").read_text() == f"MY_SERVICE_TOKEN={ENV_CANARY}\n"
    daemon.stop()
