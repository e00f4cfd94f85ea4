"""Model usage end to end: every call's tokens and cost counted exactly as the provider fake
reported them, kept across a `kill -9`, and shown in /metrics, /api/state and `soulflow usage`."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.harness import wait_for
from tests.fakes.openai_api import FakeOpenAIThread


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    raise AssertionError(f"{name}{{{wanted}}} not in /metrics")


@pytest.mark.parametrize("reported_cost", [True, False], ids=["usage.cost", "MODEL_PRICES"])
def test_usage_counted_exactly_across_a_restart(make_daemon, fake_llm: FakeOpenAIThread,
                                                reported_cost: bool) -> None:
    fake_llm.cost_per_token = 0.000002 if reported_cost else None
    # prices: 3 USD per Mtok in, 15 out (only used when the provider reports no cost)
    daemon = make_daemon(MODEL_PRICES="fake-model=3/15").start()
    fake_llm.script_reply("first answer here")
    daemon.wait_reply(daemon.say("hello there"))
    fake_llm.script_reply("second")
    daemon.wait_reply(daemon.say("and again", chat_id="other"), chat_id="other")
    sent = fake_llm.usages
    assert len(sent) == 2

    def cost(u: dict[str, float]) -> float:
        if reported_cost:
            return u["cost"]
        return (u["prompt_tokens"] * 3 + u["completion_tokens"] * 15) / 1e6

    prompt = sum(u["prompt_tokens"] for u in sent)
    completion = sum(u["completion_tokens"] for u in sent)
    usd = sum(cost(u) for u in sent)
    usage = daemon.state()["usage"]
    assert usage["total"]["calls"] == 2
    assert usage["total"]["prompt_tokens"] == prompt
    assert usage["total"]["completion_tokens"] == completion
    assert usage["total"]["cost_usd"] == pytest.approx(usd, abs=1e-6)
    chats = {r["key"]: r for r in usage["by"]["chat"]}
    assert set(chats) == {"local:test", "local:other"}
    assert chats["local:test"]["prompt_tokens"] == sent[0]["prompt_tokens"]
    assert [r["key"] for r in usage["by"]["source"]] == ["message"]
    metrics = daemon.api("GET", "/metrics").text
    assert _metric(metrics, "soulflow_model_tokens_total", provider="phi4_local",
                   model="fake-model", kind="prompt") == prompt
    assert _metric(metrics, "soulflow_model_tokens_total", provider="phi4_local",
                   model="fake-model", kind="completion") == completion
    assert _metric(metrics, "soulflow_model_cost_usd_total", provider="phi4_local",
                   model="fake-model") == pytest.approx(usd, rel=1e-6)

    def written_calls() -> int:  # the file the sync loop writes (JOURNAL_FSYNC_INTERVAL_MS)
        path = daemon.workspace / "runtime" / "usage" / "usage.json"
        data = json.loads(path.read_text()) if path.exists() else {"days": {}}
        return sum(row[5] for rows in data["days"].values() for row in rows)

    wait_for(lambda: written_calls() == 2, what="the usage file to be written")
    daemon.kill()  # kill -9: what was written stays
    daemon.start()
    fake_llm.script_reply("third")
    daemon.wait_reply(daemon.say("once more"))
    sent = fake_llm.usages
    assert len(sent) == 3
    total = daemon.state()["usage"]["total"]
    assert total["prompt_tokens"] == sum(u["prompt_tokens"] for u in sent)
    assert total["completion_tokens"] == sum(u["completion_tokens"] for u in sent)
    assert total["cost_usd"] == pytest.approx(sum(cost(u) for u in sent), abs=1e-6)

    done = daemon.cli("usage", "--since", "7d", "--by", "chat", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["total"] == total
    assert {r["key"]: r["calls"] for r in report["by"]["chat"]} == {
        "local:test": 2, "local:other": 1}
    table = daemon.cli("usage", "--by", "source")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.decode().splitlines()
    assert lines[0].startswith("Model usage ") and "3 calls" in lines[0]
    assert lines[2].split()[:2] == ["message", "3"]


def test_usage_cli_refuses_a_bad_since(make_daemon) -> None:
    daemon = make_daemon()
    done = daemon.cli("usage", "--since", "week")
    assert done.returncode == 1 and b"--since" in done.stderr
    wait_for(lambda: True)


def _texts(daemon, chat_id: str = "test") -> list[str]:  # type: ignore[no-untyped-def]
    return [m["content"] for m in daemon.replies(chat_id)]


@pytest.mark.parametrize("scope", ["BUDGET_CHAT_DAILY_USD", "BUDGET_USER_DAILY_USD",
                                   "BUDGET_DAILY_USD"])
def test_a_reached_budget_waits_for_the_operator_then_answers(
        make_daemon, fake_llm: FakeOpenAIThread, scope: str) -> None:
    fake_llm.cost_per_token = 0.001  # a few cents a call
    daemon = make_daemon(**{scope: "0.01"}).start()
    fake_llm.script_reply("first answer")
    daemon.wait_reply(daemon.say("hello"))
    spent = sum(u["cost"] for u in fake_llm.usages)
    fake_llm.script_reply("second answer")
    message_id = daemon.say("and another question")
    ask = wait_for(lambda: next((t for t in _texts(daemon) if "budget reached" in t), None),
                   what="the budget approval")
    where = {"BUDGET_CHAT_DAILY_USD": "chat local:test", "BUDGET_USER_DAILY_USD":
             "user local:", "BUDGET_DAILY_USD": "all chats"}[scope]
    assert f"budget reached: ${spent:.2f} of $0.01 today for {where}" in ask
    assert "Only an admin can approve" in ask
    assert len(fake_llm.usages) == 1  # no model call past the cap
    daemon.say("approve")  # the local chat is the operator's
    wait_for(lambda: "second answer" in _texts(daemon), what="the answer")  # nothing lost
    assert sum("budget reached" in t for t in _texts(daemon)) == 1  # told once
    # the cap rose to the spend then plus its amount (spent + 0.01), which the second call
    # passed: the next message asks again, against the raised cap
    daemon.say("third")
    wait_for(lambda: sum("budget reached" in t for t in _texts(daemon)) == 2,
             what="the second budget approval")
    assert f"of ${spent + 0.01:.2f} today" in _texts(daemon)[-1]
    assert len(fake_llm.usages) == 2
    assert message_id


def test_deny_at_the_budget_ends_the_run_without_a_call(make_daemon,
                                                        fake_llm: FakeOpenAIThread) -> None:
    fake_llm.cost_per_token = 0.001
    daemon = make_daemon(BUDGET_DAILY_USD="0.01").start()
    fake_llm.script_reply("first")
    daemon.wait_reply(daemon.say("hello"))
    daemon.say("more")
    wait_for(lambda: any("budget reached" in t for t in _texts(daemon)), what="the approval")
    daemon.say("deny")
    wait_for(lambda: any("budget is reached and was not raised" in t for t in _texts(daemon)),
             what="the refusal")
    assert len(fake_llm.usages) == 1


def test_a_cron_run_over_budget_is_skipped_and_the_operator_told(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    fake_llm.cost_per_token = 0.001
    daemon = make_daemon(BUDGET_DAILY_USD="0.01", HEARTBEAT_CHAT="local:ops").start()
    fake_llm.script_reply("first")
    daemon.wait_reply(daemon.say("hello"))
    added = daemon.cli("cron", "add", "--chat", "local:jobs", "--every", "1h",
                       "--name", "digest", "--json", "send the digest")
    assert added.returncode == 0, added.stderr
    job_id = json.loads(added.stdout)["job"]["id"]
    # an `every` job fires first one interval from now: fire it now
    fired = daemon.cli("cron", "run", job_id)
    assert fired.returncode == 0, fired.stderr
    notice = wait_for(lambda: next((t for t in _texts(daemon, "ops")
                                    if "Skipped a cron run" in t), None),
                      what="the operator's notice")
    assert "local:jobs" in notice and "budget reached" in notice and "all chats" in notice
    assert len(fake_llm.usages) == 1  # the job made no model call



def test_a_heartbeat_over_budget_is_skipped_and_the_operator_told_once(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    fake_llm.cost_per_token = 0.001
    daemon = make_daemon(BUDGET_DAILY_USD="0.01", HEARTBEAT_CHAT="local:ops",
                         HEARTBEAT_INTERVAL="1s")
    (daemon.workspace / "HEARTBEAT.md").write_text("- [ ] check the backups\n",
                                                   encoding="utf-8")
    fake_llm.script_reply("HEARTBEAT_OK")  # the first heartbeat, under the cap
    daemon.start()
    wait_for(lambda: len(fake_llm.usages) >= 1, what="the first heartbeat's call")
    notice = wait_for(lambda: next((t for t in _texts(daemon, "ops")
                                    if "Skipped a heartbeat run" in t), None),
                      what="the operator's notice", timeout=20)
    assert "budget reached" in notice and "all chats" in notice
    calls = len(fake_llm.usages)
    time.sleep(3)  # three more heartbeats: skipped without a call, and not told again
    assert len(fake_llm.usages) == calls
    assert sum("Skipped a heartbeat run" in t for t in _texts(daemon, "ops")) == 1
