"""Which runs a daemon resumes: at boot, and (several daemons) when it comes to hold chats.

`AgentDomain.resumable_runs(owns, pending_inbound=…)` is called at boot and on every change of
the chats a node holds, so it must hand each run out once, never one being driven, only in
chats the node holds, and leave to others what is theirs (a pending message's turn, the task
engine), while cut-off sub-agent and background runs are cancelled as at boot.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from soulflow.agent.run import events as ev
from soulflow.contracts import ChatRef
from tests.agent.domain_rig import agent_domain
from tests.agent.test_run_loop import ScriptedModel, reply
from tests.waiting import until

MINE = ChatRef("telegram", "1", sender_id="u1", requester_id="u1", session_key="telegram:1")
THEIRS = ChatRef("telegram", "2", sender_id="u2", requester_id="u2", session_key="telegram:2")


def owns(chat_key: str) -> bool:
    return chat_key == MINE.key


async def test_runs_are_handed_out_once_in_held_chats_only(tmp_path: Path) -> None:
    model = ScriptedModel(reply("resumed"))
    domain = agent_domain(tmp_path, model, MINE)
    loop = domain.loop
    assert loop is not None
    plain = loop.begin(chat=MINE, text="a", history=[])
    elsewhere = loop.begin(chat=THEIRS, text="b", history=[])
    pending = loop.begin(chat=MINE, text="c", history=[], inbound_key="telegram:1:7")
    task = loop.begin(chat=ChatRef("telegram", "1", task_id="task_1"), text="d", history=[])
    sub = loop.begin(chat=MINE, text="e", history=[], parent_run=plain)
    quiet = loop.begin(chat=ChatRef("telegram", "1", origin="quiet_turn"), text="f",
                       history=[])
    waiting = loop.begin(chat=MINE, text="g", history=[])
    loop.store.append(waiting, ev.Event(ev.INFO_REQUESTED, {"call_id": "", "question": "?"}))

    assert await domain.resumable_runs(owns, pending_inbound={"telegram:1:7"}) == [plain]
    assert await domain.resumable_runs(owns) == [pending]  # its message was answered meanwhile
    assert await domain.resumable_runs(owns) == []  # nothing is handed out twice
    assert loop.store.state(sub).status == ev.CANCELLED  # orphaned with its parent's call
    assert loop.store.state(quiet).status == ev.CANCELLED  # a late heartbeat, not posted
    assert loop.store.state(elsewhere).status == ev.RUNNING  # another node's to resume
    assert loop.store.state(task).status == ev.RUNNING  # the task engine's
    assert await domain.resumable_runs(lambda chat: True) == [elsewhere]  # now this node's too

    answer = await domain.resume(plain)
    assert answer.content == "resumed"
    assert await domain.resumable_runs(lambda chat: True) == []


async def test_a_run_being_driven_is_never_handed_out(tmp_path: Path) -> None:
    gate = asyncio.Event()

    class SlowModel(ScriptedModel):
        async def chat(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            await gate.wait()
            return await super().chat(*args, **kwargs)

    domain = agent_domain(tmp_path, SlowModel(reply("done")), MINE)
    loop = domain.loop
    assert loop is not None
    run_id = loop.begin(chat=MINE, text="a", history=[])
    driving = asyncio.create_task(loop.drive(run_id), name="drive")
    await until(lambda: run_id in loop.driving)
    assert await domain.resumable_runs(owns) == []  # a partition change while it runs here
    gate.set()
    assert (await driving).text == "done"
    assert run_id not in loop.driving
