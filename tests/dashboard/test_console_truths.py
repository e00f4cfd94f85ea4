"""Small truths the console and the CLI tell, against a real `soulflow run`: a daemon whose
only model fails is not `ok`; a start whose port is taken creates nothing; `soulflow status`
says a sick daemon with its exit status."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.e2e.harness import base_env, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


def tree(root: Path) -> list[str]:
    return sorted(str(Path(d, n).relative_to(root)) for d, dirs, files in os.walk(root)
                  for n in [*dirs, *files])


def test_state_is_not_ok_when_the_only_provider_fails(make_daemon, fake_llm) -> None:
    daemon = make_daemon(PROVIDER_MAX_RETRIES="0").start()
    wait_for(lambda: daemon.state()["ok"], what="a well daemon")
    fake_llm.fail_next(5, status=500)
    daemon.say("anyone there?")
    wait_for(lambda: not daemon.state()["providers"][0]["healthy"], what="the provider failing")
    state = daemon.state()
    assert state["ok"] is False
    assert any(p.startswith("model provider phi4_local failed its last call")
               for p in state["problems"]), state["problems"]
    status = daemon.cli("status")
    assert status.returncode == 1, status.stdout.decode()
    assert "PROBLEM    model provider phi4_local failed its last call" in status.stdout.decode()
    assert daemon.cli("status", "--json").returncode == 1
    # the model answers again: well again, and said so with 0
    fake_llm.reset()
    daemon.wait_reply(daemon.say("and now?"))
    wait_for(lambda: daemon.state()["ok"], what="ok again after a good call")
    assert daemon.cli("status").returncode == 0


def test_a_start_with_the_port_taken_creates_nothing(tmp_path: Path,
                                                     fake_llm: FakeOpenAIThread) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = base_env(workspace, DASHBOARD_PORT=str(port), PROVIDER="phi4_local",
                       PHI4_BASE_URL=fake_llm.base_url, PHI4_MODEL="fake-model")
        before = tree(tmp_path)
        run = subprocess.run([sys.executable, "-m", "soulflow", "run"], env=env,
                             capture_output=True, timeout=60)
    assert run.returncode == 1
    error = run.stderr.decode()
    assert f"soulflow: error: cannot listen on 127.0.0.1:{port} (Address already in use)" \
        in error and "DASHBOARD_PORT" in error
    assert "Traceback" not in error
    assert tree(tmp_path) == before == ["ws"]  # no lock, no runtime/, no default files
    assert fake_llm.requests == []  # and nothing asked of the model
