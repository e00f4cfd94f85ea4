"""The approval-message map (which platform message announced which approval), against the
file map and the Redis map: the same assertions. On Redis, a reaction that lands on another
node finds the approval the first node asked for."""

from __future__ import annotations

from tests.backends.agent_stores import AgentStores, stores

__all__ = ["stores"]  # fixture


def test_prompts_are_found_by_message_and_forgotten_per_run(stores: AgentStores) -> None:
    approvals = stores.approvals()
    assert approvals.lookup("telegram:42", "100") is None
    approvals.remember("telegram:42", ["100", "101"], "run_a", "ap_0000000a")
    approvals.remember("telegram:42", ["102"], "run_b", "ap_0000000b")
    approvals.remember("slack:C1", ["1700.1"], "run_c", "ap_0000000c")
    approvals.remember("slack:C1", [], "run_d", "ap_0000000d")  # a send with no platform ids
    assert approvals.flush()
    elsewhere = stores.approvals()  # a restart (file) or another node (redis)
    for current in (approvals, elsewhere):
        assert current.lookup("telegram:42", "101") == {"run_id": "run_a",
                                                        "approval_id": "ap_0000000a"}
        assert current.lookup("telegram:42", "102") == {"run_id": "run_b",
                                                        "approval_id": "ap_0000000b"}
        assert current.lookup("slack:C1", "100") is None  # the chat is part of the key
    elsewhere.forget_run("run_a")
    elsewhere.forget_run("run_none")
    assert elsewhere.flush()
    later = stores.approvals()
    assert later.lookup("telegram:42", "100") is None
    assert later.lookup("telegram:42", "101") is None
    assert later.lookup("telegram:42", "102") == {"run_id": "run_b",
                                                  "approval_id": "ap_0000000b"}
    assert later.lookup("slack:C1", "1700.1") == {"run_id": "run_c",
                                                  "approval_id": "ap_0000000c"}


def test_maps_with_different_names_are_apart(stores: AgentStores) -> None:
    stores.approvals("messages").remember("local:web", ["1"], "run_a", "ap_0000000a")
    tasks = stores.approvals("task-prompts")
    tasks.remember("local:web", ["2"], "task_1", "ap_0000000b")
    assert tasks.flush()
    assert stores.approvals("task-prompts").lookup("local:web", "1") is None
    assert stores.approvals("messages").lookup("local:web", "2") is None
    assert stores.approvals("task-prompts").lookup("local:web", "2") is not None
