"""Attachments are per chat, on Slack, Telegram and Discord, through the real daemon, the real
SDKs and the platform fakes: a file sent in a chat (a group and a DM) is saved in that chat's
zone, `chats/<zone>/files/`, the model is told exactly that path, and a run of another chat
cannot read it by the name it was told, neither with `read_file` nor with `exec`, nor by any
other name: absolute, `./`, `..`, doubled slashes, another letter case, the old flat layout
`runtime/inbound-files/<provider>/`, a glob, `find`, `grep -r`, `/proc/self/root`, or a
symbolic or hard link its own run made in its own folder (issue 17, finding 3).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import pytest

from soulflow.security.zones import zone_named
from tests.e2e.test_platforms import Live, own_daemon
from tests.e2e.tool_runs import require_bwrap, run_tools, tool_output
from tests.fakes.openai_api import FakeOpenAIThread

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
    require_bwrap()  # without a sandbox exec waits for an admin's approval
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


def other_spellings(workspace: PurePosixPath, told: PurePosixPath, reader: str) -> list[str]:
    """Names for the file at `told` (workspace-relative) other than the one told, as seen
    from the folder `reader` of another chat; the last three are links the reader's own
    run makes in its folder first (`link_command`)."""
    name = told.name
    upper = PurePosixPath(told.parts[0].capitalize(), *told.parts[1:])
    return [str(workspace / told), f"./{told}", str(told).replace("/", "//"),
            f"{reader}/../../{told}", str(upper),
            *(f"runtime/inbound-files/{provider}/{name}"
              for provider in ("slack", "telegram", "discord")),
            f"{reader}/peek", f"{reader}/peek-abs", f"{reader}/hard"]


def link_command(workspace: PurePosixPath, told: PurePosixPath, reader: str) -> str:
    """The reader's run links the other chat's file into its own folder (a symbolic link,
    relative and absolute, and a hard link), so the file tools see it under a name there."""
    return (f"mkdir -p {reader}; ln -sfn ../../{told} {reader}/peek; "
            f"ln -sfn {workspace / told} {reader}/peek-abs; ln -f {told} {reader}/hard 2>&1; "
            "echo linked")


def shell_command(workspace: PurePosixPath, told: PurePosixPath, reader: str) -> str:
    """Every way a shell could find and print the other chat's file."""
    name = told.name.split("_", 1)[-1]
    return (f"cat {told} ./{told} {workspace / told} /proc/self/root{workspace / told} "
            f"{reader}/peek {reader}/peek-abs {reader}/hard chats/*/files/*{name} "
            f"runtime/inbound-files/*/*{name} 2>&1; "
            f"find . {workspace} /tmp -name '*{name}' -exec cat {{}} + 2>&1; "
            "grep -r 'attachment body' . 2>&1; ls -laR chats runtime 2>&1 | head -80; "
            "echo finished")


def test_another_chat_cannot_read_a_file_by_any_other_name(live: Live) -> None:
    """Whatever the name, another chat's run never sees the file's content: the file tools
    judge the path after normalising it and never follow a link, and in `exec` the other
    chat's folder (and `runtime/`) is masked. Before the zones, attachments lay flat under
    `runtime/inbound-files/<provider>/`, open to every chat of that platform."""
    require_bwrap()
    driver = live.driver
    workspace = PurePosixPath(live.workspace)
    group = send_file(live, driver.chat, "group_ledger.txt")
    dm = send_file(live, driver.dm, "dm_letter.txt")
    leaks = []
    for reader_chat, sent in ((driver.dm, group), (driver.chat, dm)):
        canary = sent.data.decode().split()[-1]
        told = PurePosixPath(sent.told)
        if told.is_absolute():
            told = told.relative_to(workspace)
        reader = zone_named(driver.name, reader_chat).rel.as_posix()
        calls = [("exec", {"command": link_command(workspace, told, reader)}),
                 *(("read_file", {"path": path})
                   for path in other_spellings(workspace, told, reader)),
                 ("exec", {"command": shell_command(workspace, told, reader)})]
        run = run_tools(live, reader_chat, calls)
        assert "finished" in run.outputs[-1], run.outputs[-1]  # the shell ran
        assert (live.workspace / reader / "peek").is_symlink(), run.outputs[0]
        leaks += [f"{reader_chat} read {sent.told} by {name} {arguments}: {output[:300]}"
                  for (name, arguments), output in run.results() if canary in output]
    assert leaks == []
