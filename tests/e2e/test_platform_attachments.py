"""Attachments are per chat, on Slack, Telegram and Discord, through the real daemon, the real
SDKs and the platform fakes: a file sent in a chat (a group and a DM) is saved in that chat's
zone, `chats/<zone>/files/`, the model is told exactly that path, and a run of another chat
cannot read it by the name it was told, neither with `read_file` nor with `exec`.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import pytest

from soulflow.security.zones import zone_named
from tests.e2e.test_platforms import Live, own_daemon
from tests.fakes.openai_api import FakeOpenAIThread, RecordedRequest

PLATFORMS = ("slack", "telegram", "discord")
TOLD = re.compile(r"\[attachment (?P<name>[^\]\n]+?) saved at (?P<path>[^\]\n]+)\]")


@pytest.fixture(scope="module", params=PLATFORMS)
def live(request: pytest.FixtureRequest, llm: FakeOpenAIThread,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with own_daemon(request.param, tmp_path_factory.mktemp(request.param), llm) as running:
        yield running


@pytest.fixture(autouse=True)
def _quiet_model(llm: FakeOpenAIThread) -> None:
    llm.reset()


@dataclass(frozen=True)
class Sent:
    """A file a person sent, and the path the model was told it was saved at."""

    chat: str
    data: bytes
    told: str


def send_file(live: Live, chat: str, name: str) -> Sent:
    """The allowed user sends `name` (unique content) in `chat`; wait for the model's answer
    and return where the model was told the file is."""
    canary = uuid.uuid4().hex
    data = f"attachment body {canary}\n".encode()
    live.driver.post_file(f"keep this {canary}", name, data, chat=chat)
    live.wait(lambda: next((p for p in live.posts(chat) if canary in p.text), None),
              f"the answer to the file sent in {chat}")
    seen = next(t for t in live.user_texts_seen_by_model() if canary in t)
    found = TOLD.search(seen)
    assert found is not None and found["name"] == name, seen
    return Sent(chat, data, found["path"])


def tool_output(requests: list[RecordedRequest], call_id: str) -> str:
    """What the tool call `call_id` returned, as the model was shown it."""
    for request in requests:
        for message in request.json["messages"]:
            if message.get("role") == "tool" and str(message.get("tool_call_id")).endswith(
                    call_id):  # the loop prefixes the model's id with its turn
                return str(message["content"])
    raise AssertionError(f"no result of {call_id} reached the model")


def run_tool(live: Live, chat: str, tool: str, arguments: dict[str, str]) -> str:
    """A run in `chat` whose model calls `tool` once; what the tool returned."""
    call_id = f"call-{uuid.uuid4().hex[:12]}"
    live.llm.script_tool_call(tool, arguments, call_id=call_id)
    live.llm.script_reply(f"done {call_id}")
    live.driver.post(f"please run {call_id}", chat=chat)
    live.wait_post(f"done {call_id}", chat)
    return tool_output(live.llm.requests, call_id)


def test_a_file_lands_in_its_chats_zone_at_the_path_the_model_is_told(live: Live) -> None:
    driver = live.driver
    for chat, name in ((driver.chat, "group_notes.txt"), (driver.dm, "dm_notes.txt")):
        sent = send_file(live, chat, name)
        told = PurePosixPath(sent.told)
        assert not told.is_absolute(), sent.told  # relative to the workspace, as tools take
        assert told.parent == zone_named(driver.name, chat).files_rel, sent.told
        assert told.name.endswith(f"_{name}") and len(told.name) > len(name) + 8
        assert (live.workspace / told).read_bytes() == sent.data
    assert not (live.workspace / "runtime" / "inbound-files").exists()


def test_another_chat_cannot_read_a_file_by_the_name_it_was_told(live: Live) -> None:
    """Own-zone reads work; another chat's `read_file` is refused by the file tools' zone
    rule and its `exec` finds the zone masked (the file-tool and sandbox halves of trust
    zones)."""
    if shutil.which("bwrap") is None:  # without a sandbox exec waits for an admin's approval
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap (bwrap) is not installed")
        pytest.skip("bubblewrap (bwrap) is not installed")
    driver = live.driver
    group = send_file(live, driver.chat, "group_plan.txt")
    dm = send_file(live, driver.dm, "dm_diary.txt")
    secret_of = {sent.told: sent.data.decode().split()[-1] for sent in (group, dm)}

    own = run_tool(live, driver.chat, "read_file", {"path": group.told})
    assert secret_of[group.told] in own, own  # a chat reads its own attachment

    for reader, sent in ((driver.dm, group), (driver.chat, dm)):
        read = run_tool(live, reader, "read_file", {"path": sent.told})
        assert secret_of[sent.told] not in read, f"{reader} read {sent.told}: {read}"
        shell = run_tool(live, reader, "exec", {"command": f"cat {sent.told}; echo finished"})
        assert "finished" in shell, shell
        assert secret_of[sent.told] not in shell, f"{reader} ran cat {sent.told}: {shell}"
