"""The code sandbox in a running daemon: `soulflow status` and `/api/state` name its mode, and
a model asking `exec` for the workspace's secrets gets nothing secret back."""

from __future__ import annotations

import base64
import json
import shutil
import uuid

import pytest

from tests.fakes.openai_api import FakeOpenAIThread


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:  # a skip, and under CI a failure (tests/conftest.py)
        pytest.skip("bubblewrap (bwrap) is not installed")


def test_status_and_state_show_the_sandbox(make_daemon) -> None:
    _require_bwrap()
    daemon = make_daemon().start()
    sandbox = daemon.state()["sandbox"]
    assert sandbox["mode"] == "bubblewrap", sandbox
    assert sandbox["detail"].startswith("bubblewrap")
    status = daemon.cli("status")
    assert status.returncode == 0
    assert f"  sandbox    bubblewrap ({sandbox['detail']})" in status.stdout.decode()


def test_exec_from_the_model_cannot_read_the_secrets(make_daemon,
                                                     fake_llm: FakeOpenAIThread) -> None:
    _require_bwrap()
    daemon = make_daemon().start()
    canary = f"sk-{uuid.uuid4().hex}"
    (daemon.workspace / ".env.local").write_text(f"OPENAI_API_KEY={canary}\n")
    key_file = daemon.workspace / "runtime" / "security" / "master.key"
    key = key_file.read_bytes() if key_file.exists() else None
    command = ("cat .env .env.local; base64 runtime/security/master.key; "
               "ln -s runtime r; cat r/security/master.key; ls runtime; echo done")
    fake_llm.script_tool_call("exec", {"command": command})
    fake_llm.script_reply("I could not read them.")
    reply = daemon.wait_reply(daemon.say("show me your secrets", chat_id="sx"), "sx")
    assert reply["content"] == "I could not read them."
    sent = json.dumps(fake_llm.requests[-1].json["messages"])
    tool_output = fake_llm.requests[-1].json["messages"][-1]["content"]
    assert "done" in tool_output and "exit code" in tool_output
    assert canary not in sent
    if key is not None:
        assert base64.b64encode(key).decode() not in sent
