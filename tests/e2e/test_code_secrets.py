"""A secret cannot be read back through code, end to end: the fake model scripts an `exec` that
reverses a stored secret. The daemon asks first, naming the secret and showing the command as
written; once approved the command runs in the real sandbox, and the reversed value reaches
neither the model's next request nor the chat, a file, the log or the dashboard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.test_platforms import approval_for, own_daemon
from tests.fakes.openai_api import FakeOpenAIThread
from tests.security.readable import readable_forms

VALUE = "Tiger-Lily-Deploy-4242"  # shell-safe: the command uses the reference unquoted
COMMAND = "echo {{secret:deploy_pw}} | rev"
REASON = ("runs code with secret deploy_pw (code can print a value in forms that redaction "
          "does not catch)")


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:  # a skip, and under CI a failure (tests/conftest.py)
        pytest.skip("bubblewrap (bwrap) is not installed")


def files_showing(root: Path, value: str) -> list[str]:
    """Files under ``root`` from which ``value`` can be read in any form."""
    return [str(path) for path in root.rglob("*") if path.is_file()
            and readable_forms(path.read_bytes().decode("utf-8", "replace"), value)]


def test_exec_reversing_a_secret_asks_first_and_the_model_never_sees_the_value(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    _require_bwrap()
    daemon = make_daemon().start()
    stored = daemon.wait_reply(daemon.say(f"/secret set deploy_pw {VALUE}"))["content"]
    assert "Stored secret deploy_pw" in stored

    fake_llm.script_tool_call("exec", {"command": COMMAND})
    fake_llm.script_reply("Done.")
    asked = daemon.wait_reply(daemon.say("reverse my deploy password"))["content"]
    assert asked.startswith("Approval needed [ap_"), asked
    assert f'"command": "{COMMAND}"' in asked  # as written: the reference, never the value
    assert f"Reason: {REASON}." in asked
    seen_before = len(fake_llm.requests)

    assert daemon.wait_reply(daemon.say("approve"))["content"] == "Done."
    assert len(fake_llm.requests) == seen_before + 1
    messages = fake_llm.requests[-1].json["messages"]
    tool_result = messages[-1]
    assert tool_result["role"] == "tool"
    assert tool_result["content"].startswith("[REDACTED: reversed secret deploy_pw]\n")
    assert "[exit code: 0]" in tool_result["content"]  # it ran, in the sandbox

    seen = {"model requests": json.dumps([r.json for r in fake_llm.requests]),
            "chat": daemon.api("GET", "/api/chat/test/messages").text,
            "dashboard state": daemon.api("GET", "/api/state").text}
    daemon.stop()
    seen["log"] = daemon.log()
    assert {where: readable_forms(text, VALUE) for where, text in seen.items()} == {
        where: [] for where in seen}
    assert files_showing(daemon.workspace, VALUE) == []


def test_a_requester_who_is_no_admin_approves_her_own_call_on_a_platform(
        tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    """Telegram, Alice's DM, Alice on the allow-list and not an admin: the approval is an
    ordinary one, hers to decide; the chat never shows the reversed value."""
    _require_bwrap()
    fake_llm.reset()
    with own_daemon("telegram", tmp_path, fake_llm) as live:
        driver = live.driver
        driver.post(f"/secret set deploy_pw {VALUE}", chat=driver.dm)
        live.wait(lambda: any("Stored secret deploy_pw" in t for t in live.texts(driver.dm)),
                  "the secret to be stored")
        known = {p.id for p in live.posts()}
        fake_llm.script_tool_call("exec", {"command": COMMAND})
        asked = driver.post("reverse my deploy password", chat=driver.dm)
        approval = approval_for(live, asked, known)
        assert "deploy_pw" in approval.text and COMMAND in approval.text

        fake_llm.script_reply("Done.")
        driver.post("approve", chat=driver.dm)
        live.wait_post("Done.", driver.dm)
        tool_result = fake_llm.requests[-1].json["messages"][-1]
        assert tool_result["content"].startswith("[REDACTED: reversed secret deploy_pw]")
        shown = {"chat": "\n".join(live.texts()),
                 "model requests": json.dumps([r.json for r in fake_llm.requests])}
        assert {where: readable_forms(text, VALUE) for where, text in shown.items()} == {
            where: [] for where in shown}
