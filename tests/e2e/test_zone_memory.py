"""Scoped memory through the real daemon (issue 17, finding 1 and the migration), on Telegram,
Slack and Discord: `soulflow run` against the platform fakes and the fake model.

The workspace starts in today's layout: a consolidated DM of Alice's in the session store,
her facts and summaries in the shared `memory/MEMORY.md` and today's note. At start the daemon
migrates it; Alice then writes in her DM (consolidation threshold 2), her DM is consolidated
again — into her chat's zone — and her later DM requests carry what she said (before the
migration and after) in their system prompt, while no request made for Bob, in his DM or in
the group, nor for Alice in the group, carries any of it.

The fake model echoes; a consolidation request's echo is the transcript it was sent, so the
"summary" written to Alice's daily note holds her messages verbatim: that is the mark
followed here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from soulflow.agent.consolidate import CONSOLIDATED_TYPE
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.security.zones import zone_named
from tests.e2e.harness import Daemon, wait_for
from tests.e2e.platform_helpers import BotPost, Driver, make_driver
from tests.e2e.test_platforms import Live, daemon_env
from tests.e2e.tool_runs import require_bwrap, run_tools
from tests.fakes.openai_api import FakeOpenAIThread

OLD_DM = "OLDDM7741"  # what Alice said in her DM before the migration
OLD_SHARED = "OLDSHARED5520"  # her facts and summary, in the old shared global memory
NEW_DM = "NEWDM3318"  # what she says in her DM after it
#: any of the three marks; a tool's arguments spell them this way, never as the marks
MARKS = re.compile(r"(?:OLDDM|OLDSHARED|NEWDM)[0-9]+")
MARK_PATTERN = "(OLDDM|OLDSHARED|NEWDM)[0-9]+"


@dataclass
class People:
    alice: str
    alice_dm: str
    bob: str
    bob_dm: str
    group: str


def people(driver: Driver) -> People:
    """Two allowed people and their DMs on this platform's fake, and a group."""
    if driver.name == "discord":
        bob = driver.stranger
        bob_dm = str(driver.runner.call(  # type: ignore[attr-defined]
            lambda: driver.runner.fake.world.dm_channel(int(bob)).id))  # type: ignore[attr-defined]
    elif driver.name == "slack":
        bob, bob_dm = driver.stranger, "D" + driver.stranger[1:]
    else:
        bob = bob_dm = driver.stranger
    return People(driver.user, driver.dm, bob, bob_dm, driver.chat)


def allowed_env(driver: Driver, who: People) -> dict[str, str]:
    name = {"telegram": "TELEGRAM_ALLOWED_USERS", "slack": "SLACK_ALLOWED_USERS",
            "discord": "DISCORD_ALLOWED_USERS"}[driver.name]
    return {name: f"{who.alice},{who.bob}"}


def old_workspace(workspace: Path, provider: str, alice_dm: str) -> str:
    """Today's layout, with Alice's consolidated DM; returns her DM's session key."""
    today = dt.date.today().isoformat()
    memory = workspace / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text(
        "# Long-term memory\n\nOperator: answer briefly.\n\n## Learned from conversations\n\n"
        f"- Alice's favourite colour is teal {OLD_SHARED}\n")
    key = f"{provider}:{alice_dm}"
    (memory / f"{today}.md").write_text(
        f"# {today}\n\n**Conversation summary** ({key}, messages 0–5): Alice talked about "
        f"colours {OLD_SHARED}\n\n")
    sessions = FileSessionStore(workspace / "runtime" / "sessions")
    for i in range(10):
        text = f"my favourite colour is teal {OLD_DM}" if i == 0 else f"older turn {i}"
        sessions.append(key, {"role": "user" if i % 2 == 0 else "assistant", "content": text})
    sessions.append(key, {"_type": CONSOLIDATED_TYPE, "through": 5, "count": 10})
    sessions.close()
    return key


@contextlib.contextmanager
def zoned_daemon(name: str, tmp_path: Path, llm: FakeOpenAIThread
                 ) -> Iterator[tuple[Driver, Daemon, People]]:
    llm.reset()
    with make_driver(name) as driver:
        who = people(driver)
        workspace = tmp_path / "ws"
        old_workspace(workspace, name, who.alice_dm)
        env = {**daemon_env(workspace, llm, driver), **allowed_env(driver, who),
               "MEMORY_CONSOLIDATION_THRESHOLD": "2", "MEMORY_CONSOLIDATION_KEEP_LAST": "1"}
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield driver, daemon, who
        finally:
            daemon.close()


def system_prompts(llm: FakeOpenAIThread, text: str) -> list[str]:
    """The system prompt of every agent request whose input is `text`."""
    found = []
    for request in llm.requests:
        messages = request.json["messages"]
        last = next((m for m in reversed(messages) if m["role"] == "user"), None)
        if last is not None and str(last["content"]).endswith(text) and \
                messages[0]["role"] == "system":
            found.append(str(messages[0]["content"]))
    return found


def requests_for(llm: FakeOpenAIThread, text: str) -> list[str]:
    """Every agent request (all its messages, as JSON) whose input is `text`."""
    found = []
    for request in llm.requests:
        messages = request.json["messages"]
        last = next((m for m in reversed(messages) if m["role"] == "user"), None)
        if last is not None and str(last["content"]).endswith(text):
            found.append(json.dumps(messages, ensure_ascii=False))
    return found


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
def test_alice_s_dm_memory_stays_in_her_dm(platform: str, tmp_path: Path,
                                           llm: FakeOpenAIThread) -> None:
    with zoned_daemon(platform, tmp_path, llm) as (driver, daemon, who):
        ws = daemon.workspace
        state = json.loads((ws / "runtime" / "migrations" / "zones.json").read_text())
        assert state["status"] == "done"
        assert OLD_SHARED not in (ws / "memory" / "MEMORY.md").read_text()
        backup = ws / state["backup"]
        assert OLD_SHARED in (backup / "memory" / "MEMORY.md").read_text()

        def say(text: str, chat: str, user: str) -> BotPost:
            posted = driver.post(text, user=user, chat=chat)
            try:
                return wait_for(lambda: next((p for p in driver.posts(posted.chat)
                                              if p.text == f"echo: {text}"), None),
                                30, what=f"the echo of {text!r}")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{daemon.log()[-3000:]}") from None

        say(f"my new favourite is green {NEW_DM}", who.alice_dm, who.alice)
        zone = zone_named(platform, who.alice_dm)
        note = ws / zone.memory_rel / f"{dt.date.today().isoformat()}.md"
        wait_for(lambda: note.is_file() and NEW_DM in note.read_text(), 30,
                 what="Alice's DM consolidated into her chat's zone")
        assert OLD_DM in note.read_text()  # her history before the migration, again
        assert not (ws / "memory" / note.name).exists()  # nothing into global memory

        asked = [0]

        def recalled() -> bool:  # her next DM requests carry it (the prompt rereads in 1 s)
            asked[0] += 1
            text = f"what do you remember {asked[0]}"
            say(text, who.alice_dm, who.alice)
            prompts = system_prompts(llm, text)
            return bool(prompts) and OLD_DM in prompts[-1] and NEW_DM in prompts[-1]
        wait_for(recalled, 30, interval=0.2, what="Alice's DM prompt to hold her memory")

        bob_texts = ["bob in his dm", "bob in the group", "alice in the group"]
        say(bob_texts[0], who.bob_dm, who.bob)
        say(bob_texts[1], who.group, who.bob)
        say(bob_texts[2], who.group, who.alice)
        for text in bob_texts:
            requests = requests_for(llm, text)
            assert requests, text
            for request in requests:
                for mark in (OLD_DM, NEW_DM, OLD_SHARED):
                    assert mark not in request, (text, mark)
        alice_zone = zone.rel.as_posix()
        assert all(alice_zone not in r for text in bob_texts for r in requests_for(llm, text))


def consolidated(workspace: Path, mark: str) -> bool:
    """`mark` is in a memory note somewhere: global `memory/` or any chat's zone."""
    notes = [*workspace.glob("memory/*.md"), *workspace.glob("chats/*/memory/*.md")]
    return any(mark in note.read_text(errors="replace") for note in notes if note.is_file())


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
def test_no_reply_or_tool_run_for_bob_shows_alice_s_dm_memory(platform: str, tmp_path: Path,
                                                               llm: FakeOpenAIThread) -> None:
    """Finding 1's other routes: Alice's DM memory reached Bob through `read_file` and `exec`
    and in the replies to him, not only in his system prompt. Once her DM is consolidated,
    Bob's runs — in his DM and in the group — read her chat's memory and the global memory
    by every path, `cat` and `grep -r` the workspace, and the model recites to Bob all it
    was given (prompt and tool results). None of her marks reaches a tool result or a post.
    Before the zones her DM's summary went into the global `memory/<today>.md`: every
    route showed it."""
    require_bwrap()
    with zoned_daemon(platform, tmp_path, llm) as (driver, daemon, who):
        live = Live(driver, daemon, llm)
        ws = daemon.workspace
        for turn in range(8):  # her DM grows until it is consolidated (wherever that goes)
            if consolidated(ws, NEW_DM):
                break
            text = f"my new favourite is green {NEW_DM}" if turn == 0 else f"and {turn}"
            driver.post(text, user=who.alice, chat=who.alice_dm)
            live.wait_post(f"echo: {text}", who.alice_dm)
        live.wait(lambda: consolidated(ws, NEW_DM), "Alice's DM to be consolidated", 30)

        today = dt.date.today().isoformat()
        alice = zone_named(platform, who.alice_dm).rel.as_posix()
        paths = [f"{alice}/memory/{today}.md", f"{alice}/memory/MEMORY.md",
                 f"{ws}/{alice}/memory/{today}.md", f"./{alice}//memory/../memory/{today}.md",
                 f"memory/{today}.md", "memory/MEMORY.md"]
        shell = (f"cat {alice}/memory/*.md memory/*.md; grep -rE '{MARK_PATTERN}' . "
                 f"{ws} 2>&1; echo finished")
        calls = [*(("read_file", {"path": path}) for path in paths),
                 ("exec", {"command": shell})]
        leaks = []
        for chat in (who.bob_dm, who.group):
            run = run_tools(live, chat, calls, user=who.bob, recite=True)
            assert "finished" in run.outputs[-1], run.outputs[-1]  # the command ran
            leaks += [f"{name} {args} in {chat}: {MARKS.findall(output)}"
                      for (name, args), output in run.results() if MARKS.search(output)]
            if MARKS.search(run.said()):
                leaks.append(f"the reply to Bob in {chat}: {MARKS.findall(run.said())}")
        assert leaks == []
