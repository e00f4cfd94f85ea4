"""`soulflow status`'s lines and exit status for one `/api/state`: 0 only when well, errors
cut at a word's end."""

from __future__ import annotations

from typing import Any

import pytest

from soulflow.cli.status import clip, is_well, print_status

ERROR = ("telegram answered 409 Conflict: terminated by other getUpdates request; make sure "
         "that only one bot instance is running, then restart the daemon")


def state(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ok": True, "problems": [], "version": "0.1.0", "pid": 1, "uptime_s": 5.0,
        "workspace": "/ws", "provider": "phi4_local",
        "queues": {"inbound_pending": 0, "dlq": 0}, "counters": {"received": 0},
        "channels": [{"name": "local", "status": "connected"}], "sessions": []}
    return {**base, **changes}


def test_a_well_daemon_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_status(state()) == 0
    assert "local      connected" in capsys.readouterr().out


def test_a_failing_channel_exits_one_and_its_error_ends_at_a_word(
        capsys: pytest.CaptureFixture[str]) -> None:
    failing = {"name": "telegram", "status": "failing", "last_error": ERROR}
    assert print_status(state(channels=[failing])) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "telegram" in x)
    shown = line.split("last error: ", 1)[1]
    assert shown.endswith("…") and len(shown) <= 120
    assert ERROR.startswith(shown[:-1])  # a cut where a word ends: the next is a space
    assert ERROR[len(shown) - 1] == " "


def test_a_problem_exits_one_and_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    sick = state(ok=False, problems=["model provider phi4_local failed its last call: boom"])
    assert print_status(sick) == 1
    assert "PROBLEM    model provider phi4_local failed its last call: boom" in \
        capsys.readouterr().out
    assert print_status(state(provider=None)) == 0
    assert "provider   none configured" in capsys.readouterr().out


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("short enough", 20, "short enough"),
    ("one two three four", 12, "one two…"),
    ("spaces\n  and\tnewlines   flattened", 100, "spaces and newlines flattened"),
    ("https://example.org/a-very-long-address-without-any-space", 20,
     "https://example.org…"),  # no word end in the second half: cut where it must be
    ("last, words; here", 14, "last, words…"),
])
def test_clip(text: str, limit: int, expected: str) -> None:
    assert clip(text, limit) == expected
    assert len(clip(text, limit)) <= limit


def test_is_well() -> None:
    assert is_well(state())
    assert not is_well(state(channels=[{"name": "x", "status": "failing"}]))
    assert not is_well(state(problems=["Redis unreachable since ..."]))
