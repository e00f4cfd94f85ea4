"""`/api/state`'s `ok` is the daemon's real health, not a constant: false until it is ready,
and false with the reason while a channel fails or a supervised loop is down."""

from __future__ import annotations

from pathlib import Path

from soulflow.config import load_settings
from soulflow.runtime import create_runtime


async def test_state_reports_problems_instead_of_always_ok(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"DASHBOARD_ENABLED": "false", "LOG_LEVEL": "warning"})
    runtime = create_runtime(settings)
    assert (await runtime.state())["ok"] is False  # built, not started: not ready
    await runtime.start()
    try:
        state = (await runtime.state())
        assert (state["ok"], state["problems"]) == (True, [])

        runtime.health.read_failed("local", "disk on fire")  # the channel is failing
        state = (await runtime.state())
        assert state["ok"] is False
        assert state["problems"] == ["channel local is failing: disk on fire"]

        runtime.health.read_ok("local")
        assert (await runtime.state())["ok"] is True
    finally:
        await runtime.stop()
