"""The ops service inside a real daemon: a run whose model call hangs is stopped by the
watchdog with its reason, the person gets an answer, and /api/state shows what happened."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.harness import Daemon, base_env, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


def test_the_watchdog_stops_a_hanging_run_and_reports_it(tmp_path: Path,
                                                          fake_llm: FakeOpenAIThread) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=fake_llm.base_url,
                   PHI4_MODEL="fake-model", OPS_TICK_S="1", OPS_RUN_STUCK_AFTER_S="10",
                   PROVIDER_TIMEOUT_S="600", HEARTBEAT_INTERVAL="0")
    daemon = Daemon(workspace, env, tmp_path / "daemon.log")
    try:
        daemon.start()
        fake_llm.script_delay(120)  # the model accepts the request and never answers in time
        message_id = daemon.say("summarise the logs", chat_id="slow")
        reply = daemon.wait_reply(message_id, "slow", timeout=60)
        assert reply["content"] == "Stopped."
        fake_llm.wait_hung_up(0, timeout=30)  # the hanging model call was cancelled
        # the reading after the watchdog's tick: nothing runs any more, the action is kept
        ops = wait_for(lambda: (o := daemon.state()["ops"])["runs"] == [] and o,
                       what="an ops reading without the stopped run")
        [action] = [a for a in ops["actions"] if a["kind"] == "run_aborted"]
        assert action["reason"].startswith("no progress for")
        # the daemon answers normally afterwards
        again = daemon.wait_reply(daemon.say("hi", chat_id="slow"), "slow")
        assert again["content"] == "echo: hi"
    finally:
        daemon.close()
