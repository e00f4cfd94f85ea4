"""A model budget reached in a group chat, through the real inbound pipeline.

Conversation → AgentDomain → AgentLoop with its journal, a usage meter on the file store and
the three caps: Alice's second message finds her chat's (or her own, or everyone's) cap
reached, so the run waits as an admins-only approval naming the spend and the cap. Alice
(the requester) and Bob cannot approve it, by reply or reaction; Carol (an admin) can, and
then the message is answered with nothing lost. Unit checks of the meter (prices, sources)
sit at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import ApproverPolicy
from soulflow.agent.budget import BUDGET_TOOL, Budgets, Scope
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.usage import Source, UsageMeter, parse_prices, source_of, usage_report
from soulflow.backends.file.approvals import FileApprovalMap
from soulflow.backends.file.backend import FileBackend
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.backends.file.usage import FileUsageStore
from soulflow.bus.bus import MessageBus
from soulflow.contracts import ChatRef, ProviderResult, Usage
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath
from tests.agent.test_approval_people import ALICE, BOB, CAROL, Pipeline, wire_chat

COST = 0.04  # USD each model call reports


class PricedModel:
    """Answers `answer: <text>` and reports a fixed cost, as OpenRouter reports `usage.cost`."""

    name = "priced"

    def __init__(self) -> None:
        self.calls = 0
        self.cost = COST

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        self.calls += 1
        return ProviderResult(content=f"answer: {messages[-1]['content']}",
                              usage=Usage(10, 5, 15, self.cost), provider="priced",
                              model="m1")

    async def close(self) -> None:
        return None


@pytest.fixture(params=["BUDGET_CHAT_DAILY_USD", "BUDGET_USER_DAILY_USD", "BUDGET_DAILY_USD"])
async def budget_pipe(request: pytest.FixtureRequest, tmp_path: Path
                      ) -> AsyncIterator[tuple[Pipeline, PricedModel, Budgets]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    sessions = FileSessionStore(tmp_path / "sessions")
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "d.json")), sessions)
    meter = UsageMeter(FileUsageStore(tmp_path / "usage.json"))
    caps = {"BUDGET_CHAT_DAILY_USD": "chat_daily_usd", "BUDGET_USER_DAILY_USD":
            "user_daily_usd", "BUDGET_DAILY_USD": "daily_usd"}
    budgets = Budgets(meter, **{caps[request.param]: 0.03})
    model = PricedModel()
    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: model, ToolRegistry(),
                     context.system_prompt,
                     lambda state, approved: ToolContext(workspace, state.chat,
                                                         approved=approved),
                     usage=meter, budgets=budgets)
    approvals = FileApprovalMap(tmp_path / "approvals.json")
    agent = AgentDomain(context, sessions, loop, approvals,
                        approvers=ApproverPolicy(lambda p, u: (p, u) == ("chat", CAROL)))
    adapter, conversation = wire_chat(bus, agent, approvals, tmp_path)
    await bus.start()
    claiming = asyncio.create_task(conversation.claim_loop(), name="inbound:claim")
    try:
        yield (Pipeline(conversation, agent, adapter, None, bus, [0]),  # type: ignore[arg-type]
               model, budgets)
    finally:
        claiming.cancel()
        await asyncio.gather(claiming, return_exceptions=True)
        await conversation.stop(5)
        await bus.stop(5)
        await bus.backend.stop()


async def test_the_requester_cannot_approve_her_budget_an_admin_can(
        budget_pipe: tuple[Pipeline, PricedModel, Budgets]) -> None:
    pipe, model, budgets = budget_pipe
    count = len(pipe.adapter.sent)
    await pipe.say(ALICE, "first")
    await pipe.sent_after(count, lambda c: c == "answer: first")
    request = await pipe.ask("second")
    scope = next(s for s in Scope if budgets.base_cap(s))
    key = {Scope.ALL: "", Scope.USER: f"chat:{ALICE}", Scope.CHAT: "chat:team"}[scope]
    where = {Scope.ALL: "all chats", Scope.USER: f"user {key}", Scope.CHAT: f"chat {key}"}[scope]
    assert f"budget reached: $0.04 of $0.03 today for {where}" in request.content
    assert model.calls == 1
    for who, word in ((ALICE, "approve"), (BOB, "approve")):
        count = len(pipe.adapter.sent)
        await pipe.say(who, word)
        refusal = await pipe.sent_after(count, lambda c: True)
        assert refusal.content.startswith("Only an admin can approve this: budget reached"), who
    await pipe.react(ALICE, "white_check_mark", request)
    await pipe.drained()
    assert pipe.waiting() and model.calls == 1
    loop = pipe.agent.loop
    assert loop is not None
    run_id = loop.store.find(chat_key="chat:team")[-1]
    asked = [e.data for e in loop.store.events(run_id) if e.type == ev.APPROVAL_REQUESTED]
    assert [(a["tool"], a["admins_only"]) for a in asked] == [(BUDGET_TOOL, True)]

    count = len(pipe.adapter.sent)
    await pipe.react(CAROL, "white_check_mark", request)
    await pipe.sent_after(count, lambda c: c == "answer: second")  # nothing lost
    assert model.calls == 2
    # the cap rose for today to the spend then plus its amount: 0.04 + 0.03
    assert budgets.meter.store.raises(budgets.meter.today()) == {
        f"{scope}:{key}": pytest.approx(0.04)}


def test_prices_and_sources() -> None:
    prices = parse_prices("openai/gpt-4o=2.5/10, org/model=with=eq=1/2")
    assert prices["openai/gpt-4o"].prompt_per_mtok == 2.5
    assert prices["org/model=with=eq"].completion_per_mtok == 2
    for bad in ("gpt", "gpt=1", "=1/2", "gpt=-1/2", "gpt=a/b"):
        with pytest.raises(ValueError):
            parse_prices(bad)
    assert source_of(ChatRef("telegram", "1", sender_id="u")) == Source.MESSAGE
    assert source_of(ChatRef("telegram", "1", sender_id="cron")) == Source.CRON
    assert source_of(ChatRef("telegram", "1", session_key="cron:j1")) == Source.CRON
    assert source_of(ChatRef("telegram", "1", origin="quiet_turn")) == Source.HEARTBEAT
    assert source_of(ChatRef("telegram", "1", task_id="t1")) == Source.TASK


def test_meter_prices_unreported_costs(tmp_path: Path) -> None:
    meter = UsageMeter(FileUsageStore(tmp_path / "u.json"), parse_prices("m1=3/15"))
    result = ProviderResult("x", usage=Usage(1_000_000, 100_000, 0), provider="p", model="m1")
    assert meter.record(result, ChatRef("p", "c", sender_id="u")).cost_usd == pytest.approx(4.5)
    reported = ProviderResult("x", usage=Usage(10, 10, 20, 0.25), provider="p", model="m1")
    assert meter.record(reported, ChatRef("p", "c")).cost_usd == 0.25  # the report wins
    other = ProviderResult("x", usage=Usage(10, 10, 20), provider="p", model="unpriced")
    assert meter.record(other, ChatRef("p", "c")).cost_usd == 0.0
    [(key, totals)] = [r for r in meter.rows() if r[0].model == "m1" and r[0].user]
    assert key.user == "p:u" and key.source == "message" and totals.calls == 1


async def test_at_a_cap_the_chat_is_told_once_and_every_waiting_message_answered(
        budget_pipe: tuple[Pipeline, PricedModel, Budgets]) -> None:
    """More messages at a reached cap: the chat gets one budget prompt, not one per message;
    the admin's one approval raises the cap once and answers every message that waited."""
    pipe, model, budgets = budget_pipe
    count = len(pipe.adapter.sent)
    await pipe.say(ALICE, "first")
    await pipe.sent_after(count, lambda c: c == "answer: first")
    request = await pipe.ask("second")
    count = len(pipe.adapter.sent)
    await pipe.say(ALICE, "third")
    await pipe.say(BOB, "fourth")
    scope = next(s for s in Scope if budgets.base_cap(s))
    if scope is Scope.USER:  # Bob's own spending is not at Alice's user cap
        await pipe.sent_after(count, lambda c: c == "answer: fourth")
    await pipe.drained()  # (by asking for /help)
    told = [m.content for m in pipe.adapter.sent[count:] if not m.content.startswith("Commands")]
    # told once: the others wait quietly
    assert told == (["answer: fourth"] if scope is Scope.USER else [])
    count = len(pipe.adapter.sent)
    model.cost = 0.0  # the raised cap (0.04 spent + 0.03) then covers all of them
    await pipe.react(CAROL, "white_check_mark", request)
    for text in ("second", "third") if scope is Scope.USER else ("second", "third", "fourth"):
        await pipe.sent_after(count, lambda c, t=text: c == f"answer: {t}")
    told = [m.content for m in pipe.adapter.sent[count:]]
    assert not [t for t in told if "budget reached" in t], told
    assert model.calls == 4
    assert len(budgets.meter.store.raises(budgets.meter.today())) == 1  # raised once
    assert list(budgets.meter.store.raises(budgets.meter.today()).values()) == [
        pytest.approx(0.04)]


def test_the_report_names_the_people_it_counts(tmp_path: Path) -> None:
    """`/api/state` and `soulflow usage` show a person's name beside their id; a name is
    stored when it is new or changed, not on every call."""
    store = FileUsageStore(tmp_path / "u.json")
    meter = UsageMeter(store)
    written: list[tuple[str, str]] = []
    real_name = store.name

    def name(user: str, display: str) -> None:
        written.append((user, display))
        real_name(user, display)

    store.name = name  # type: ignore[method-assign]
    result = ProviderResult("x", usage=Usage(1, 1, 2, 0.01), provider="p", model="m1")
    for _ in range(3):
        meter.record(result, ChatRef("telegram", "1", sender_id="42", sender_name="Alice"))
    meter.record(result, ChatRef("telegram", "1", sender_id="cron"))
    report = usage_report(meter)
    assert report["names"] == {"telegram:42": "Alice"}
    assert written == [("telegram:42", "Alice")]
