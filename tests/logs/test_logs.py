"""Log output: text by default, JSON lines on request, context fields from the agent loop,
secrets redacted in both formats (including by the filter the daemon adds at start)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.runs import FileRunJournal
from soulflow.contracts import ProviderResult
from soulflow.logs import SoulflowHandler, configure_logging, log_context, resolve_format
from soulflow.security.redact import Redactor, install_log_redaction

SECRET = "hunter2-very-secret-value"
SLACK_TOKEN = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Our handler on the root logger for the test; removed afterwards (pytest's stay)."""
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    yield out
    for handler in [h for h in root.handlers if isinstance(h, SoulflowHandler)]:
        root.removeHandler(handler)
    root.setLevel(level)


def json_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def test_json_lines_carry_the_context(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream, redactor=Redactor())
    log = logging.getLogger("soulflow.test")
    log.info("outside")
    with log_context(chat="slack:C1", run_id="run_1"):
        with log_context(provider="openrouter"):
            log.warning("inside %s", "both")
        log.info("provider gone")
    first, inside, after = json_lines(stream)
    assert set(first) == {"at", "level", "logger", "msg"}
    assert first["at"].endswith("Z") and first["logger"] == "soulflow.test"
    assert inside == {**inside, "level": "warning", "msg": "inside both", "chat": "slack:C1",
                      "run_id": "run_1", "provider": "openrouter"}
    assert "provider" not in after and after["run_id"] == "run_1"


def test_text_is_the_default_and_shows_the_context(stream: io.StringIO,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert resolve_format() == "text"
    monkeypatch.setenv("LOG_FORMAT", "json")
    assert resolve_format() == "json" and resolve_format("text") == "text"
    configure_logging("info", resolve_format("text"), stream=stream, redactor=Redactor())
    with log_context(chat="telegram:42"):
        logging.getLogger("soulflow.x").info("hello")
    [line] = stream.getvalue().splitlines()
    assert line.endswith(" INFO soulflow.x: hello [chat=telegram:42]")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_are_redacted_in_both_formats(stream: io.StringIO, fmt: str) -> None:
    configure_logging("info", fmt, stream=stream, redactor=Redactor([SECRET]))
    log = logging.getLogger("soulflow.secret")
    log.info("token %s and value %s", SLACK_TOKEN, SECRET)
    try:
        raise RuntimeError(f"failed with {SECRET}")
    except RuntimeError:
        log.exception("boom")
    # what the daemon adds at start (opened secrets, .env credentials) covers this handler too
    uninstall = install_log_redaction(Redactor(["opened-at-runtime-42"]))
    try:
        log.info("later: opened-at-runtime-42")
    finally:
        uninstall()
    text = stream.getvalue()
    for leaked in (SECRET, SLACK_TOKEN, "opened-at-runtime-42"):
        assert leaked not in text
    assert text.count("[REDACTED]") >= 4
    if fmt == "json":
        lines = json_lines(stream)
        assert len(lines) == 3 and "RuntimeError" in lines[1]["exc"]


def test_reconfiguring_replaces_our_handler(stream: io.StringIO) -> None:
    configure_logging("warning", "text", stream=stream, redactor=Redactor())
    configure_logging("debug", "json", stream=stream, redactor=Redactor())
    ours = [h for h in logging.getLogger().handlers if isinstance(h, SoulflowHandler)]
    assert len(ours) == 1 and logging.getLogger().level == logging.DEBUG


class LoggingModel:
    """A provider that logs while it answers, as real ones do on retries."""

    name = "openrouter"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        logging.getLogger("soulflow.providers.test").warning("model called")
        return ProviderResult(content="done")

    async def close(self) -> None:
        return None


async def test_a_run_stamps_its_lines(stream: io.StringIO, tmp_path: Path) -> None:
    configure_logging("info", "json", stream=stream, redactor=Redactor())
    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), LoggingModel, ToolRegistry(),
                     lambda _chat: "system", lambda state, approved: ToolContext(
                         workspace=tmp_path, chat=ChatRef("slack", "C9"), approved=approved))
    run_id = loop.begin(chat=ChatRef("slack", "C9"), text="hi", history=[])
    assert (await loop.drive(run_id)).text == "done"
    [called] = [e for e in json_lines(stream) if e["msg"] == "model called"]
    assert called["run_id"] == run_id and called["chat"] == "slack:C9"
    assert called["provider"] == "openrouter"


def test_a_later_call_without_a_format_keeps_the_chosen_one(
        stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """`soulflow --log-format json chat` sets JSON first; the chat client's own setup only
    lowers the level and must not switch back to text."""
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    configure_logging("info", "json", stream=stream, redactor=Redactor())
    handler = configure_logging("warning", None, stream=stream, redactor=Redactor())
    logging.getLogger("soulflow.x").warning("still json")
    assert json_lines(stream)[-1]["msg"] == "still json"
    assert handler.level == logging.NOTSET and logging.getLogger().level == logging.WARNING
