"""Redactor for logs/sessions/events/dashboard, and the logging filter."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from soulflow.security.redact import RedactingFilter, Redactor, secret_env_values
from soulflow.security.syntax import REDACTED
from tests.security import samples

ENV = {
    "SLACK_BOT_TOKEN": "xyz-slack-bot-value",
    "OPENAI_API_KEY": "provider-key-value",
    "DB_PASSWORD": "db-pass-value",
    "SMTP_PASS": "smtp-pass-value",
    "CLIENT_SECRET": "client-secret-value",
    "SHORT_TOKEN": "abc12",  # under 6 chars: ignored
    "HOME": "/home/someone",  # not secret-looking
    "PATH": "/usr/bin:/bin",
    "PWD": "/work/project",  # a directory, not a password
}


def test_secret_env_values_selects_by_name_and_length() -> None:
    assert sorted(secret_env_values(ENV)) == sorted(
        [
            "xyz-slack-bot-value",
            "provider-key-value",
            "db-pass-value",
            "smtp-pass-value",
            "client-secret-value",
        ]
    )


def test_env_values_are_redacted() -> None:
    redactor = Redactor.from_environ(ENV)
    text = "connect db-pass-value as /home/someone with provider-key-value; abc12"
    assert redactor.redact(text) == f"connect {REDACTED} as /home/someone with {REDACTED}; abc12"
    assert redactor.known_count == 5


def test_registered_values_longest_first() -> None:
    redactor = Redactor(["secret", "secret-and-more"])
    assert redactor.redact("x secret-and-more y secret") == f"x {REDACTED} y {REDACTED}"
    redactor.register("late-value")
    assert redactor.redact("a late-value") == f"a {REDACTED}"
    redactor.register("abc")  # too short, ignored
    assert redactor.redact("abc") == "abc"


def test_detectors_apply_without_storage() -> None:
    redactor = Redactor()
    text = f"error: password=hunter22 key={samples.OPENAI_KEY} auth Bearer {samples.BEARER}"
    assert redactor.redact(text) == (
        f"error: password={REDACTED} key={REDACTED} auth Bearer {REDACTED}"
    )


def test_references_are_not_redacted() -> None:
    text = "password={{secret:inbound.slack.c1.password.v2}}"
    assert Redactor().redact(text) == text


def test_plain_text_is_unchanged() -> None:
    text = "2025-01-01 INFO turn=3 tokens=1234 ts=1700000000000 order 1234567812345678"
    assert Redactor.from_environ(ENV).redact(text) == text
    assert Redactor().redact("") == ""


def test_redact_obj_recurses_and_blanks_secret_fields() -> None:
    redactor = Redactor(["known-value"])
    event = {
        "text": "said known-value",
        "password": "hunter22",
        "api_key": 12345678,
        "max_tokens": 4096,
        "token_count": 12,
        "nested": [{"Authorization": "opaque"}, ("t", f"k {samples.GITHUB_PAT}")],
        "enabled": True,
        "empty_token": "",
    }
    out = redactor.redact_obj(event)
    assert out == {
        "text": f"said {REDACTED}",
        "password": REDACTED,
        "api_key": REDACTED,
        "max_tokens": 4096,
        "token_count": 12,
        "nested": [{"Authorization": REDACTED}, ("t", f"k {REDACTED}")],
        "enabled": True,
        "empty_token": "",
    }
    assert event["password"] == "hunter22"  # input not mutated


def test_repr_hides_values() -> None:
    assert "known-value" not in repr(Redactor(["known-value"]))


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter(Redactor(["env-secret-value"])))
    logger = logging.getLogger("tests.security.redact.capture")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger, stream
    logger.handlers = []


def test_log_filter_redacts_message_and_args(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("value %s and %r", "env-secret-value", {"k": "password=hunter22"})
    logger.warning("token " + samples.SLACK_TOKENS[0])
    out = stream.getvalue()
    assert "env-secret-value" not in out and "hunter22" not in out
    assert samples.SLACK_TOKENS[0] not in out
    assert out.count(REDACTED) == 3


def test_log_filter_redacts_tracebacks(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise RuntimeError("failed with env-secret-value")
    except RuntimeError:
        logger.exception("boom")
    out = stream.getvalue()
    assert "RuntimeError" in out and "env-secret-value" not in out


def test_log_filter_survives_bad_format_args(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("broken %d env-secret-value", "not-a-number")
    assert "env-secret-value" not in stream.getvalue()
