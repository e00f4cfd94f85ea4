"""Model usage end to end: every call's tokens and cost counted exactly as the provider fake
reported them, kept across a `kill -9`, and shown in /metrics, /api/state and `soulflow usage`."""

from __future__ import annotations

import json
import re

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

    daemon.kill()  # kill -9: what was counted stays
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
