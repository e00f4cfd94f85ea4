"""Redaction knows every credential: the platform token shapes, values kept only in `.env`,
values opened for a tool; and every sink applies it (log handlers, thread journals, model
requests, replies). Session files and the event hub take the same redactor (see runtime/daemon.py);
the end-to-end proof is tests/e2e/test_secrets.py."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.run import events as ev
from soulflow.backends.file.runs import FileRunJournal
from soulflow.config import load_settings
from soulflow.security.detectors import REDACTION_DETECTORS, find_sensitive_spans
from soulflow.security.redact import Redactor, install_log_redaction
from soulflow.security.redacting_provider import RedactingProvider
from soulflow.security.syntax import REDACTED

TELEGRAM = "123456789:AAEhBOweik6ad9r_QXMENQjcrGbqCr4K-ZZ"
DISCORD = (base64.b64encode(b"112233445566778899").decode().rstrip("=")
           + ".GhIjKl.T3stOnlyNotReal_abcdefghijklmnopqrst")
XAPP = "xapp-1-A0123456789-1234567890123-T3stOnlyNotReal0123456789abcdef"
ENV_ONLY = "plain-words-no-shape-canary-4711"  # nothing but .env says it is secret
ENV_CUSTOM = "another-canary-value-0815"


@pytest.mark.parametrize(("token", "kind"), [
    (TELEGRAM, "telegram_bot_token"), (DISCORD, "discord_bot_token"), (XAPP, "slack_token")])
def test_platform_token_detectors(token: str, kind: str) -> None:
    forms = [f"token {token} here", f'{{"t": "{token}"}}', f"Authorization: Bot {token}"]
    if kind == "telegram_bot_token":  # the Bot API puts the token in the URL path
        forms.append(f"https://api.telegram.org/bot{token}/getMe")
    for text in forms:
        spans = find_sensitive_spans(text, REDACTION_DETECTORS)
        assert [(d.type, text[d.start:d.end]) for d in spans] == [(kind, token)], text


@pytest.mark.parametrize("text", [
    "meet at 12:30:45, ticket 1234567:abc",
    "version 1.2.3 of a.b.c",
    "ids MTIz.abcdef.ghijklmnopqrstuvwxyz0123456789",  # base64 of "123": too short an id
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLW5vdC1yZWFs",  # a JWT stays a JWT
])
def test_platform_detectors_leave_ordinary_text(text: str) -> None:
    kinds = {d.type for d in find_sensitive_spans(text, REDACTION_DETECTORS)}
    assert not kinds & {"telegram_bot_token", "discord_bot_token"}


@pytest.fixture
def redactor(tmp_path: Path) -> Redactor:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"TELEGRAM_BOT_TOKEN={ENV_ONLY}\nMY_SERVICE_TOKEN={ENV_CUSTOM}\n"
                             "LOG_LEVEL=info\n")
    return Redactor.for_settings(load_settings(ws, environ={}), environ={})


def test_seeded_from_env_file_only(redactor: Redactor) -> None:
    text = f"a {ENV_ONLY} b {ENV_CUSTOM} c info"
    assert redactor.redact(text) == f"a {REDACTED} b {REDACTED} c info"
    redactor.register("opened-for-a-tool-9999")  # what ToolRegistry does for opened secrets
    assert redactor.redact("x opened-for-a-tool-9999") == f"x {REDACTED}"


def test_log_handlers(redactor: Redactor) -> None:
    logger = logging.getLogger("h2.redaction.test")
    logger.propagate = False
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger.addHandler(handler := Keep())
    try:
        uninstall = install_log_redaction(redactor, logger)
        logger.warning("token %s, url bot%s", ENV_ONLY, TELEGRAM)
        uninstall()
        logger.warning("after %s", "nothing")
    finally:
        logger.removeHandler(handler)
    assert records == [f"token {REDACTED}, url bot{REDACTED}", "after nothing"]


def test_thread_journal_on_disk_is_redacted(tmp_path: Path, redactor: Redactor) -> None:
    store = FileRunJournal(tmp_path / "threads", fsync="never", redact=redactor.redact_strings)
    store.append("r1", ev.Event(ev.RUN_STARTED, {"run_id": "r1", "chat": {},
                                                 "text": f"hi {ENV_ONLY}"}))
    store.append("r1", ev.Event(ev.TOOL_RESULT, {
        "id": "c1", "output": f"found {ENV_CUSTOM}", "password": "{{secret:KEEP_ME}}"}))
    store.compact()
    store.close()
    journal = (tmp_path / "threads" / "journal.jsonl").read_text()
    assert ENV_ONLY not in journal and ENV_CUSTOM not in journal
    assert "{{secret:KEEP_ME}}" in journal  # references survive: a resumed run needs them
    reloaded = FileRunJournal(tmp_path / "threads", fsync="never")
    assert reloaded.events("r1")[1].data["password"] == "{{secret:KEEP_ME}}"
    reloaded.close()


async def test_model_requests_are_redacted(redactor: Redactor) -> None:
    seen: list[Any] = []

    class Inner:
        name = "fake"
        model = "m"

        async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                       on_stream: Any = None, abort: Any = None) -> str:
            seen.append((messages, tools))
            return "ok"

        async def close(self) -> None:
            return None

    guarded = RedactingProvider(Inner(), redactor)
    messages = [{"role": "tool", "content": f"page says {ENV_ONLY}"},
                {"role": "assistant", "tool_calls": [{"function": {
                    "arguments": f'{{"url": "x?k={TELEGRAM}", "p": "{{{{secret:A}}}}"}}'}}]}]
    assert await guarded.chat(messages, [{"t": 1}]) == "ok"
    sent = repr(seen)
    assert ENV_ONLY not in sent and TELEGRAM not in sent and "{{secret:A}}" in sent
    assert messages[0]["content"] == f"page says {ENV_ONLY}"  # the caller's copy is untouched
    assert guarded.name == "fake" and guarded.model == "m"


def test_platform_detector_edges() -> None:
    tail = TELEGRAM.split(":")[1]
    too_long_id = f"1234567890123:{tail}"  # 13 digits: not a bot id
    assert not find_sensitive_spans(f"x {too_long_id} y", REDACTION_DETECTORS)
    decoy = "QUJDREVGR0hJSktMTU5PUFFSU1RVVg.abcdef.ghijklmnopqrstuvwxyz0123456"  # id is letters
    text = f"{decoy} then {DISCORD} and {TELEGRAM}:{TELEGRAM}"
    found = [(s.type, text[s.start:s.end]) for s in find_sensitive_spans(text, REDACTION_DETECTORS)]
    assert found == [("discord_bot_token", DISCORD), ("telegram_bot_token", TELEGRAM),
                     ("telegram_bot_token", TELEGRAM)]
