"""`soulflow status` prints each channel's health and the latest quarantined messages."""

from __future__ import annotations

import pytest

from soulflow.cli.status import _print_backend, _print_channels


def test_status_shows_failing_channels_and_the_quarantine(
        capsys: pytest.CaptureFixture[str]) -> None:
    state = {
        "queues": {"inbound_dlq": 2},
        "channels": [
            {"name": "local", "status": "connected", "consecutive_failures": 0,
             "send_failures": 0, "restarts": 0, "last_error": ""},
            {"name": "telegram", "status": "failing", "consecutive_failures": 4,
             "send_failures": 1, "restarts": 2,
             "last_error": "polling failed, cannot reach Telegram (HTTP 500)"},
        ],
        "inbound_dlq": [
            {"provider": "telegram", "chat_id": "-100", "stage": "parse",
             "error": "KeyError: 'date'"},
            {"provider": "slack", "chat_id": "C1", "stage": "seal", "error": "OSError: full"},
        ],
    }
    _print_channels(state)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["local", "connected"]
    assert out[2].startswith("    telegram   failing, 4 failed read(s) in a row, "
                             "1 failed send(s) in a row, restarted 2x; last error: polling")
    assert "quarantined 2 inbound message(s)" in out[3]
    assert out[4:] == ["    telegram:-100 at parse: KeyError: 'date'",
                       "    slack:C1 at seal: OSError: full"]


def test_status_names_the_redis_backend_and_a_lost_redis(
        capsys: pytest.CaptureFixture[str]) -> None:
    _print_backend({"kind": "file"})
    assert capsys.readouterr().out == ""  # the default says nothing
    backend = {"kind": "redis", "url": "redis://10.0.0.5:6379/0", "node_id": "n1",
               "connected": True, "since": None, "last_error": "",
               "partitions": {"held": [0, 3], "total": 16}}
    _print_backend(backend)
    assert capsys.readouterr().out.split() == [
        "backend", "redis", "redis://10.0.0.5:6379/0,", "node", "n1,", "partitions", "2/16"]
    _print_backend({**backend, "connected": False, "since": 1.0e9,
                    "last_error": "Error 111 connecting"})
    line = capsys.readouterr().out
    assert "UNREACHABLE since" in line and line.rstrip().endswith("Error 111 connecting")


def test_status_shows_which_node_reads_a_shared_account(
        capsys: pytest.CaptureFixture[str]) -> None:
    channel = {"name": "telegram", "consecutive_failures": 0, "send_failures": 0,
               "restarts": 0, "last_error": ""}
    _print_channels({"queues": {}, "channels": [
        {**channel, "status": "connected", "role": "leader", "lease_token": 7},
        {**channel, "name": "discord", "status": "standby", "role": "standby",
         "lease_token": None},
        {**channel, "name": "slack", "status": "connected", "role": None}]})
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "    telegram   connected, reading as leader (lease token 7)"
    assert out[2] == "    discord    standby, another node reads the account (this one sends)"
    assert out[3] == "    slack      connected"  # file backend: no role
