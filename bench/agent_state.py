"""What the agent's state costs per turn on files and on Redis.

A turn of a tool-using run does, on the calling thread (the event loop waits): the user's and
the assistant's session appends and a tail read for the context, a lookup of the run by its
inbound key, six run-journal events (start, model turn, tool started, tool result, model turn,
done; each append returns the new state) and two state reads (as `AgentLoop.drive` does).
This bench times exactly those calls for `--turns` turns over `--chats` chats, on the file
stores and on the Redis stores (a private redis-server with AOF `--fsync always|everysec`),
and prints the time per turn and per call. As in the daemon, the journals redact what they
store (`Redactor.redact_strings`), the run starts with the session's last 20 messages as its
history, and the Redis journal writes under a partition lease this node holds (token 1).

    python bench/agent_state.py [--turns 500] [--chats 20] [--fsync always]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soulflow.agent.run import events as ev  # noqa: E402
from soulflow.backends.base import (
    RunJournal,  # noqa: E402
    SessionStore,  # noqa: E402
)
from soulflow.backends.file.runs import FileRunJournal  # noqa: E402
from soulflow.backends.file.sessions import FileSessionStore  # noqa: E402
from soulflow.backends.redis.runs import RedisRunJournal  # noqa: E402
from soulflow.backends.redis.sessions import RedisSessionStore  # noqa: E402
from soulflow.backends.redis.sync_client import StateRedis, sync_client  # noqa: E402
from soulflow.contracts import ChatRef  # noqa: E402
from soulflow.security.redact import Redactor  # noqa: E402
from tests.backends.redis_server import RedisServer  # noqa: E402

CALLS_PER_TURN = 12  # 3 session calls, 1 find, 6 appends, 2 state reads


def one_turn(sessions: SessionStore, runs: RunJournal, chat: ChatRef, n: int) -> None:
    key = chat.session_key
    inbound = f"{chat.key}:{n}"
    sessions.append(key, {"role": "user", "content": f"question {n} " + "x" * 200,
                          "inbound_key": inbound})
    history = sessions.last(key, 20)
    assert not runs.find(inbound_key=inbound)
    run_id = f"run_{uuid.uuid4().hex[:16]}"
    call = {"id": "t1.c1", "name": "read_file", "arguments": {"path": "notes.md"}}
    events = (
            ev.Event(ev.RUN_STARTED, {"run_id": run_id, "chat": chat.to_dict(),
                                      "text": f"question {n}", "history": history,
                                      "inbound_key": inbound, "max_turns": 10}),
            ev.Event(ev.MODEL_TURN, {"content": "", "tool_calls": [call]}),
            ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c1", "name": "read_file"}),
            ev.Event(ev.TOOL_RESULT, {"id": "t1.c1", "name": "read_file", "status": "ok",
                                      "output": "y" * 2000}),
            ev.Event(ev.MODEL_TURN, {"content": "the answer", "tool_calls": []}),
            ev.Event(ev.DONE, {"status": ev.COMPLETED, "final": "the answer"}))
    runs.append(run_id, events[0])
    runs.state(run_id)
    runs.state(run_id)
    for event in events[1:]:
        runs.append(run_id, event)
    sessions.append(key, {"role": "assistant", "content": "the answer",
                          "inbound_key": inbound})


def measure(label: str, sessions: SessionStore, runs: RunJournal, turns: int, chats: int) -> None:
    refs = [ChatRef("telegram", str(c), session_key=f"telegram:{c}") for c in range(chats)]
    started = time.perf_counter()
    cpu = time.process_time()
    for n in range(turns):
        one_turn(sessions, runs, refs[n % chats], n)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    per_call_us = wall / turns / CALLS_PER_TURN * 1e6
    print(f"{label:<24} {wall / turns * 1000:8.2f} ms/turn {per_call_us:8.0f} µs/call "
          f"{cpu / turns * 1000:8.2f} ms CPU/turn (this process)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--fsync", choices=("always", "everysec"), default="always")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        directory = Path(tmp)
        redactor = Redactor.from_environ({})  # one per store pair: its memo starts empty
        sessions = FileSessionStore(directory / "sessions", fsync="interval",
                                redact=redactor.redact)
        runs = FileRunJournal(directory / "threads", fsync="interval",
                           redact=redactor.redact_strings)
        measure("file (fsync interval)", sessions, runs, args.turns, args.chats)
        sessions.close()
        runs.close()
        server = RedisServer(directory / "redis", "--appendonly", "yes",
                             "--appendfsync", args.fsync)
        server.start()
        try:
            state = StateRedis(sync_client(server.url), "bench:")
            redactor = Redactor.from_environ({})
            measure(f"redis (AOF {args.fsync})", RedisSessionStore(state, redact=redactor.redact),
                    RedisRunJournal(state, redact=redactor.redact_strings,
                                     fence=lambda chat_key: 1), args.turns, args.chats)
            state.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
