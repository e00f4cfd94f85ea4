"""The planner against the loopback OpenAI-compatible fake: a bad plan, the retry, a good plan."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.tasks import NodeKind, execution_groups
from soulflow.tasks.planner import PlanError, Planner
from tests.fakes.openai_api import FakeOpenAI

TOOLS = {"web_fetch": "fetch a web page", "message": "send a message", "read_file": ""}

GOOD_PLAN = {
    "title": "Vendor comparison",
    "nodes": [
        {"id": "v1", "kind": "agent", "goal": "research vendor one", "tools": ["web_fetch"]},
        {"id": "v2", "kind": "agent", "goal": "research vendor two", "tools": ["web_fetch"]},
        {"id": "compare", "kind": "agent", "goal": "compare them", "tools": [],
         "inputs": {"one": {"from": "v1"}, "two": {"from": "v2"}}},
        {"id": "ok", "kind": "approval", "prompt": "Send the summary?",
         "depends_on": ["compare"]},
        {"id": "send", "kind": "tool", "tool": "message",
         "params": {"text": "summary"}, "depends_on": ["ok"]},
    ],
}

BAD_PLAN = {
    "title": "Vendor comparison",
    "nodes": [
        {"id": "v1", "kind": "agent", "goal": "research", "tools": ["browser"]},
        {"id": "send", "kind": "tool", "depends_on": ["v9"]},
    ],
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def planner(fake: FakeOpenAI) -> AsyncIterator[Planner]:
    provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
        name="fake", base_url=fake.base_url, model="m1", max_retries=0))
    yield Planner(provider, TOOLS, TOOLS)
    await provider.close()


async def test_bad_plan_is_retried_with_its_errors_then_the_good_one_is_used(
        fake: FakeOpenAI, planner: Planner) -> None:
    fake.script_reply("Here you go:\n```json\n" + json.dumps(BAD_PLAN) + "\n```")
    fake.script_reply(json.dumps(GOOD_PLAN))
    plan = await planner.plan("research vendors one and two, compare, mail me")
    assert plan.attempts == 2 and plan.title == "Vendor comparison" and plan.risky
    assert [n.id for n in plan.graph.nodes] == ["v1", "v2", "compare", "ok", "send"]
    assert plan.graph.node("ok").kind is NodeKind.APPROVAL
    assert execution_groups(plan.graph) == [["v1", "v2"], ["compare"], ["ok"], ["send"]]

    first, second = fake.requests
    system = first.json["messages"][0]["content"]
    assert "- web_fetch: fetch a web page" in system and "- read_file" in system
    retry = second.json["messages"]
    assert retry[2]["role"] == "assistant" and "browser" in retry[2]["content"]
    feedback = retry[3]["content"]
    assert feedback.startswith("That plan is invalid:")
    # the schema problem (a tool node without "tool") is reported precisely
    assert "nodes/1: 'tool' is a required property" in feedback


async def test_graph_problems_are_fed_back_too(fake: FakeOpenAI, planner: Planner) -> None:
    unknown_tool = {"title": "t", "nodes": [
        {"id": "a", "kind": "tool", "tool": "rm_rf"},
        {"id": "b", "kind": "tool", "tool": "read_file", "depends_on": ["ghost"]}]}
    fake.script_reply(json.dumps(unknown_tool))
    fake.script_reply(json.dumps({"title": "t", "nodes": [
        {"id": "a", "kind": "tool", "tool": "read_file", "params": {"path": "x"}}]}))
    plan = await planner.plan("read x")
    assert plan.attempts == 2
    feedback = fake.requests[1].json["messages"][3]["content"]
    assert "node 'a' uses unknown tool 'rm_rf'" in feedback
    assert "node 'b' depends on unknown node 'ghost'" in feedback


async def test_two_bad_plans_are_reported(fake: FakeOpenAI, planner: Planner) -> None:
    fake.script_reply("I think you should first research the vendors.")
    fake.script_reply(json.dumps({"nodes": []}))
    with pytest.raises(PlanError) as info:
        await planner.plan("do it")
    problems = info.value.problems
    assert problems[0].startswith("attempt 1: the answer is not JSON")
    assert any(p.startswith("attempt 2: (top level): 'title' is a required property")
               for p in problems)
    assert len(fake.requests) == 2


async def test_a_good_first_plan_takes_one_request(fake: FakeOpenAI, planner: Planner) -> None:
    fake.script_reply(json.dumps(GOOD_PLAN))
    plan = await planner.plan("x")
    assert plan.attempts == 1 and len(fake.requests) == 1
