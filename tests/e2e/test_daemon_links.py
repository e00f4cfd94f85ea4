"""The daemon never follows a link the agent planted (issue 17, findings 6 and 7), through the
real daemon, a platform's real SDK against its fake, and the fake model.

Finding 6, reads: `skills/x/SKILL.md -> runtime/bus/inbound.jsonl` handed other chats'
messages to the `skill` tool, and links in `templates/`, `agents/` and `memory/MEMORY.md` put
host files and the vault key's bytes into model requests. Here every such link is planted
(by the test: `exec` can no longer write the operator zone, findings 4 and 5, but a link may
predate that or come from an approved write) next to the operator's own control files; once
the controls show in Alice's prompt, runs in her DM and in the group call the `skill` tool on
every planted skill and the model recites all it was given. No model request and no reply
carries a host file, a run of the key's bytes, or another chat's message.

Finding 7, writes: `memory/<today>.md -> /outside/file` got the consolidation text. Here the
global today's note is such a link, and the model itself links its chat's today's note
(`chats/<zone>/memory/<today>.md`, in its own folder, which `exec` may write) to the same
outside file; consolidation then runs for that chat, and the outside file stays as it was.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import re
import string
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from soulflow.security.zones import zone_named
from tests.e2e.harness import Daemon
from tests.e2e.platform_helpers import make_driver
from tests.e2e.test_platforms import Live, daemon_env
from tests.e2e.test_zone_memory import People, allowed_env, people
from tests.e2e.tool_runs import fresh_prompt, require_bwrap, run_tools
from tests.fakes.openai_api import FakeOpenAIThread

TODAY = dt.date.today().isoformat()
KEY_WINDOW = 8  # this many consecutive key bytes in a request count as the key leaking


@dataclass
class Linked:
    """A running daemon whose vault key the test knows, and a folder outside its workspace."""

    live: Live
    who: People
    key: str  # the vault key's 32 bytes: letters, so no redaction shape could hide them
    host: Path

    @property
    def workspace(self) -> Path:
        return self.live.workspace


@contextlib.contextmanager
def linked_daemon(platform: str, tmp_path: Path, llm: FakeOpenAIThread,
                  **settings: str) -> Iterator[Linked]:
    """A daemon on `platform` where Alice and Bob may talk; its vault key is made before the
    first start, as an operator restoring one would."""
    llm.reset()
    key = "".join(random.choice(string.ascii_lowercase) for _ in range(32))
    workspace = tmp_path / "ws"
    security = workspace / "runtime" / "security"
    security.mkdir(parents=True)
    for folder in (workspace / "runtime", security):
        os.chmod(folder, 0o700)
    (security / "master.key").write_bytes(key.encode())
    os.chmod(security / "master.key", 0o600)
    host = tmp_path / "host"
    host.mkdir()
    with make_driver(platform, paced=False) as driver:
        who = people(driver)
        env = {**daemon_env(workspace, llm, driver), **allowed_env(driver, who), **settings}
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield Linked(Live(driver, daemon, llm), who, key, host)
        finally:
            daemon.close()


def key_runs(text: str, key: str) -> list[str]:
    """How many runs of `KEY_WINDOW` key bytes `text` holds, as a list ([] or one entry)."""
    found = sum(key[i:i + KEY_WINDOW] in text for i in range(len(key) - KEY_WINDOW + 1))
    return [f"{found} runs of {KEY_WINDOW} key bytes"] if found else []


def last_user_text(messages: list[dict[str, object]]) -> str:
    return next((str(m["content"]) for m in reversed(messages) if m.get("role") == "user"), "")


def test_links_in_operator_files_put_nothing_into_model_requests(
        tmp_path: Path, llm: FakeOpenAIThread) -> None:
    """Finding 6 on Slack: links in templates/, agents/, memory/ and skills/ to a host file,
    the vault key and the inbound journal (another chat's messages)."""
    with linked_daemon("slack", tmp_path, llm) as linked:
        live, who, ws, host = linked.live, linked.who, linked.workspace, linked.host
        bob_note = f"bobprivate{uuid.uuid4().hex[:10]}"
        live.driver.post(f"my private note {bob_note}", user=who.bob, chat=who.bob_dm)
        live.wait_post(f"echo: my private note {bob_note}", who.bob_dm)
        inbound = ws / "runtime" / "bus" / "inbound.jsonl"
        live.wait(lambda: bob_note in inbound.read_text(errors="replace"),
                  "Bob's message in the inbound journal")

        host_secret = f"hostsecret{uuid.uuid4().hex[:10]}"
        (host / "secret.txt").write_text(f"host file {host_secret}\n")
        (host / "skilldir").mkdir()
        (host / "skilldir" / "SKILL.md").write_text(
            f"---\nname: hostskill\ndescription: host skill {host_secret}\n---\n{host_secret}\n")
        key_file = "runtime/security/master.key"
        planted = {"templates/zz-host.md": host / "secret.txt",
                   "templates/zz-key.md": f"../{key_file}",
                   "agents/spy-host.md": host / "secret.txt",
                   "agents/spy-key.md": f"../{key_file}",
                   "memory/MEMORY.md": f"../{key_file}",
                   f"memory/{TODAY}.md": host / "secret.txt",
                   "skills/inbox/SKILL.md": "../../runtime/bus/inbound.jsonl",
                   "skills/hostfile/SKILL.md": host / "secret.txt",
                   "skills/keyfile/SKILL.md": f"../../{key_file}",
                   "skills/hostdir": host / "skilldir"}
        for rel, target in planted.items():
            link = ws / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        assert key_runs((ws / "memory" / "MEMORY.md").read_text(), linked.key)  # it points
        control = f"control{uuid.uuid4().hex[:10]}"  # the operator's own, regular files
        (ws / "templates" / "zz-control.md").write_text(f"Operator note {control}.\n")
        (ws / "skills" / "control").mkdir()
        (ws / "skills" / "control" / "SKILL.md").write_text(
            f"---\nname: control\ndescription: {control}skill\n---\n{control}body\n")
        fresh_prompt(live, who.alice_dm, who.alice, [control, f"{control}skill"])

        skills = ["inbox", "hostfile", "keyfile", "hostdir", "hostskill", "control"]
        calls = [("skill", {"name": name}) for name in skills]
        runs = [run_tools(live, chat, calls, user=user, recite=True)
                for chat, user in ((who.alice_dm, who.alice), (who.group, who.alice))]
        assert all(f"{control}body" in run.outputs[-1] for run in runs)  # the tool works

        leaks = []
        for request in live.llm.requests:
            messages = request.json["messages"]
            text = json.dumps(messages, ensure_ascii=False)
            whose = last_user_text(messages)[:60]
            found = key_runs(text, linked.key) + [mark for mark in (host_secret, bob_note)
                                                  if mark in text]
            if bob_note in whose:  # Bob's own request holds his own note
                found.remove(bob_note)
            if found:
                leaks.append(f"the request for {whose!r}: {found}")
        for run in runs:
            said = run.said()
            found = key_runs(said, linked.key) + [mark for mark in (host_secret, bob_note)
                                                  if mark in said]
            if found:
                leaks.append(f"the reply in {run.posts[0].chat}: {found}")
        assert leaks == []

        # Since the zones a run's own folder is writable from exec: the model links its
        # chat's MEMORY.md to the key, next to a regular today's note (the control).
        require_bwrap()
        zone = zone_named("slack", who.alice_dm).rel.as_posix()
        zone_control = f"zonecontrol{uuid.uuid4().hex[:10]}"
        plant = (f"mkdir -p {zone}/memory && ln -sfn {ws}/{key_file} {zone}/memory/MEMORY.md "
                 f"&& echo 'note {zone_control}' > {zone}/memory/{TODAY}.md && echo planted")
        seen_before = len(live.llm.requests)
        run = run_tools(live, who.alice_dm, [("exec", {"command": plant})], user=who.alice)
        assert "planted" in run.outputs[0], run.outputs[0]
        assert (ws / zone / "memory" / "MEMORY.md").is_symlink()
        prompt = fresh_prompt(live, who.alice_dm, who.alice, [zone_control])
        assert key_runs(prompt, linked.key) == []
        assert [key_runs(json.dumps(request.json["messages"]), linked.key)
                for request in live.llm.requests[seen_before:]
                if key_runs(json.dumps(request.json["messages"]), linked.key)] == []


def test_consolidation_never_writes_through_a_linked_daily_note(
        tmp_path: Path, llm: FakeOpenAIThread) -> None:
    """Finding 7 on Discord: global `memory/<today>.md` and the chat's own today's note
    (linked by the model from `exec`) point at an outside file; Alice's DM is consolidated."""
    require_bwrap()
    outside = tmp_path / "outside" / "diary.txt"
    outside.parent.mkdir()
    outside.write_text("the operator's own diary, nothing of the bot's\n")
    before = outside.read_bytes()
    with linked_daemon("discord", tmp_path, llm, MEMORY_CONSOLIDATION_THRESHOLD="2",
                       MEMORY_CONSOLIDATION_KEEP_LAST="1") as linked:
        live, who, ws = linked.live, linked.who, linked.workspace
        (ws / "memory" / f"{TODAY}.md").unlink(missing_ok=True)
        (ws / "memory" / f"{TODAY}.md").symlink_to(outside)
        note = f"{zone_named('discord', who.alice_dm).rel.as_posix()}/memory/{TODAY}.md"
        plant = (f"mkdir -p {Path(note).parent} && ln -sfn {outside} {note}; "
                 f"ln -sfn {outside} memory/{TODAY}.md 2>&1; echo planted")
        run = run_tools(live, who.alice_dm, [("exec", {"command": plant})], user=who.alice)
        assert "planted" in run.outputs[0], run.outputs[0]
        assert os.readlink(ws / note) == str(outside)  # the model's own link is in place

        session = f"discord:{who.alice_dm}"
        tried = re.compile(rf"(consolidated messages \d+-\d+|memory consolidation) of "
                           rf"{re.escape(session)}\b")
        mark = f"diarymark{uuid.uuid4().hex[:10]}"
        for turn in range(8):  # her DM grows until its consolidation has been tried
            if tried.search(live.daemon.log()):
                break
            text = f"remember {mark}" if turn == 0 else f"and {turn}"
            live.driver.post(text, user=who.alice, chat=who.alice_dm)
            live.wait_post(f"echo: {text}", who.alice_dm)
        live.wait(lambda: tried.search(live.daemon.log()), "Alice's DM to be consolidated", 30)
        live.settle()
        assert outside.read_bytes() == before, outside.read_text(errors="replace")
        for link in (ws / "memory" / f"{TODAY}.md", ws / note):
            assert os.readlink(link) == str(outside), link

        # a chat's whole memory folder linked outside: consolidation writes nothing there
        group = zone_named("discord", who.group).rel.as_posix()
        plant = (f"mkdir -p {group} && {{ test ! -e {group}/memory || mv {group}/memory "
                 f"{group}/memory.old; }} && ln -sn {outside.parent} {group}/memory && "
                 "echo planted")
        run = run_tools(live, who.group, [("exec", {"command": plant})], user=who.alice)
        assert "planted" in run.outputs[0], run.outputs[0]
        assert os.readlink(ws / group / "memory") == str(outside.parent)
        tried = re.compile(rf"(consolidated messages \d+-\d+|memory consolidation) of "
                           rf"{re.escape(f'discord:{who.group}')}\b")
        for turn in range(8):
            if tried.search(live.daemon.log()):
                break
            live.driver.post(f"group talk {turn}", user=who.alice, chat=who.group)
            live.wait_post(f"echo: group talk {turn}", who.group)
        live.wait(lambda: tried.search(live.daemon.log()), "the group to be consolidated", 30)
        live.settle()
        assert sorted(p.name for p in outside.parent.iterdir()) == ["diary.txt"]
        assert outside.read_bytes() == before
