"""Shared pieces of the doctor tests: a quiet base environment and a port nobody listens on."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from soulflow.doctor.model import Status
from soulflow.doctor.runner import DoctorReport

# No embedded model probe and no fixed dashboard port: each test turns on what it checks.
BASE_ENV = {"LOCAL_MODEL": "off", "DASHBOARD_PORT": "0"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def closed_port_url(path: str = "") -> str:
    """An http URL on a loopback port that was just free: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


def line(report: DoctorReport, name: str) -> tuple[Status, str, str]:
    """(status, message, fix) of the single result called `name`."""
    found = [r for r in report.results if r.name == name]
    assert len(found) == 1, f"{name}: {[r.name for r in report.results]}"
    return found[0].status, found[0].message, found[0].fix
