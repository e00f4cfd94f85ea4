"""Real `soulflow run` daemons sharing one Redis, against the Telegram fake: the harness of the
cluster end-to-end tests (tests/backends/test_cluster_daemons.py, test_redis_restart_daemon.py)
and of bench/cluster.py.

Every node is its own process with its own workspace (as on separate machines: templates and
agents are deployed like config, state lives in Redis), the same REDIS_URL and key prefix, and
its own SOULFLOW_NODE_ID. Which node reads the Telegram account is read from its log: the
channel's reader logs when it starts and stops reading the account, the election when the
lease is lost (a SIGKILLed node logs nothing more, so a dead node never counts as the reader).

The chats are supergroups where one allowed user mentions the bot; with CHANNEL_FOLD_MAX=1 the
fake model's "echo: <text>" answers each message on its own, so a test can tell exactly which
messages were answered, how often and in which order.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from tests.e2e.harness import Daemon, base_env, wait_for
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread

BOT_USERNAME = "soulflow_test_bot"
USER_ID = 111111
#: what a node logs when its channel reader starts reading the account ("reads") and when
#: that ends: the reader stops, the account's lease is lost, or the channel loop crashed
_READING = re.compile(r"channel telegram: this node (?:\(\S+\) )?(reads|stopped reading) "
                      r"the account|(lost) leadership of account:telegram\b"
                      r"|loop channel:telegram (crashed)")
_START_MARK = "===== start "
T = TypeVar("T")


def long_polling_since(tg: FakeTelegramThread, since: float) -> bool:
    """A getUpdates long poll (timeout > 0: the first start's priming read is over) arrived
    after `since` (monotonic, the fake records the same clock)."""
    return any(r.method == "getUpdates" and r.params.get("timeout") and r.time >= since
               for r in tg.requests)


class TelegramChats:
    """`count` supergroups on the fake, and the words of the flood posted into them."""

    def __init__(self, tg: FakeTelegramThread, count: int) -> None:
        self.tg = tg
        self.ids = [-1004000000000 - i for i in range(1, count + 1)]
        for chat in self.ids:
            tg.add_chat(chat, "supergroup", title=f"cluster {chat}")

    def env(self) -> dict[str, str]:
        return {"TELEGRAM_API_URL": self.tg.url, "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
                "TELEGRAM_ALLOWED_USERS": str(USER_ID), "CHANNEL_POLL_TIMEOUT_S": "1"}

    def node_env(self, node: str) -> dict[str, str]:
        """The fake's API under `/i/<node>/`: the fake counts each node's polls apart."""
        return {"TELEGRAM_API_URL": f"{self.tg.url}/i/{node}"}

    def polls(self) -> Counter[str]:
        """getUpdates calls so far, per node."""
        return Counter(self.tg.call(lambda: dict(self.tg.fake.polls_by)))

    def conflicts(self) -> int:
        """409 Conflicts a poller received (two nodes polled the account at once)."""
        return int(self.tg.call(lambda: self.tg.fake.conflicts))

    @staticmethod
    def text(chat: int, n: int) -> str:
        """The n-th message of chat index `chat` (its echo is "echo: " + this)."""
        return f"c{chat} m{n}"

    def post(self, chat: int, n: int) -> None:
        self.tg.push_message(self.ids[chat], f"@{BOT_USERNAME} {self.text(chat, n)}",
                             from_id=USER_ID, chat_type="supergroup")

    def post_round(self, n: int) -> None:
        """Message n in every chat."""
        for chat in range(len(self.ids)):
            self.post(chat, n)

    def replies(self, chat: int) -> list[str]:
        """The bot's texts in chat index `chat`, in the order the platform accepted them."""
        return self.tg.sent_texts(self.ids[chat])

    def all_replies(self) -> dict[int, list[str]]:
        sent = self.tg.snapshot("sent_messages")
        by_chat: dict[int, list[str]] = {chat: [] for chat in range(len(self.ids))}
        index = {chat_id: chat for chat, chat_id in enumerate(self.ids)}
        for message in sent:
            chat = index.get(message["chat"]["id"])
            if chat is not None:
                by_chat[chat].append(message.get("text", message.get("caption", "")))
        return by_chat

    def missing(self, rounds: Iterable[int]) -> list[str]:
        """Messages of `rounds` (in every chat) with no reply yet."""
        replies = self.all_replies()
        wanted = list(rounds)
        return [self.text(chat, n) for chat, texts in replies.items() for n in wanted
                if f"echo: {self.text(chat, n)}" not in texts]


@dataclass
class Node:
    """One daemon of the cluster."""

    name: str
    daemon: Daemon
    killed_at: list[float] = field(default_factory=list)

    def start(self) -> Node:
        self.daemon.start()
        return self

    def kill(self) -> float:
        """SIGKILL; returns when (monotonic) the signal was sent."""
        at = time.monotonic()
        self.daemon.kill()
        self.killed_at.append(at)
        return at

    @property
    def alive(self) -> bool:
        return self.daemon.alive()

    def current_log(self) -> str:
        """The log of the running (or last) start only."""
        text = self.daemon.log()
        return text[text.rfind(_START_MARK):]

    @property
    def leads(self) -> bool:
        """This node is alive and its channel reader last said it reads the account."""
        if not self.alive:
            return False
        changes = ["".join(groups) for groups in _READING.findall(self.current_log())]
        return bool(changes) and changes[-1] == "reads"

    def logged_at(self, pattern: str) -> list[float]:
        """When (epoch seconds, from the log's own timestamps) this node logged a line
        matching `pattern` in its current start: what it did, not when a test noticed."""
        times = []
        for line in self.current_log().splitlines():
            if re.search(pattern, line):
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                times.append(stamp.timestamp())  # the daemon logs local time, as we read it
        return times



class Cluster:
    """Builds nodes on one Redis key prefix; every node is closed on `close()`."""

    def __init__(self, tmp_path: Path, *, redis_url: str, llm_url: str, prefix: str,
                 platform_env: dict[str, str], lease_ttl_s: float = 2.0, partitions: int = 8,
                 node_env: Callable[[str], dict[str, str]] | None = None, **env: str) -> None:
        self.tmp_path = tmp_path
        self.node_env = node_env or (lambda name: {})
        # one vault key for every node, as deployed (docs/scaling.md): each reads it from disk
        key = tmp_path / "master.key"
        if not key.exists():
            key.touch(mode=0o600)
            key.write_bytes(os.urandom(32))
        self.settings = {
            "PROVIDER": "phi4_local", "PHI4_BASE_URL": llm_url, "PHI4_MODEL": "fake-model",
            "SOULFLOW_MASTER_KEY_FILE": str(key),
            "SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_url, "REDIS_KEY_PREFIX": prefix,
            "REDIS_LEASE_TTL_S": f"{lease_ttl_s:g}", "REDIS_PARTITIONS": str(partitions),
            "CHANNEL_FOLD_MAX": "1", "CHANNEL_SEND_INTERVAL_MS": "0",
            **platform_env, **env}
        self.lease_ttl_s = lease_ttl_s
        self.nodes: list[Node] = []

    def add(self, name: str, **env: str) -> Node:
        """A node (not started) with a workspace of its own."""
        workspace = self.tmp_path / name
        workspace.mkdir(parents=True, exist_ok=True)
        settings = {**self.settings, **self.node_env(name), **env}
        daemon = Daemon(workspace, base_env(workspace, SOULFLOW_NODE_ID=name, **settings),
                        self.tmp_path / f"{name}.log")
        node = Node(name, daemon)
        self.nodes.append(node)
        return node

    def start(self, nodes: list[Node]) -> None:
        """Start several nodes at once (each start waits for its dashboard's /healthz)."""
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            list(pool.map(Node.start, nodes))

    def alive(self) -> list[Node]:
        return [node for node in self.nodes if node.alive]

    def leaders(self) -> list[Node]:
        return [node for node in self.nodes if node.leads]

    def wait_one_leader(self, timeout: float = 30.0) -> Node:
        """Until exactly one live node reads the account; returns it."""
        def one() -> Node | None:
            leaders = self.leaders()
            return leaders[0] if len(leaders) == 1 else None
        return self.wait(one, timeout, "exactly one node to read the Telegram account")

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        """`wait_for` that shows each node's log tail when it times out."""
        try:
            return wait_for(predicate, timeout, interval=0.02, what=what)
        except AssertionError as exc:
            raise self.failure(str(exc)) from None

    def failure(self, message: str) -> AssertionError:
        """`message` with the tail of every node's log."""
        tails = "\n".join(f"--- {node.name} (log tail) ---\n{node.daemon.log()[-3000:]}"
                          for node in self.nodes)
        return AssertionError(f"{message}\n{tails}")

    def wait_answered(self, chats: TelegramChats, rounds: range, timeout: float) -> None:
        """Until every message of `rounds` has its reply; a timeout names the missing ones
        and what their chats got instead."""
        try:
            wait_for(lambda: not chats.missing(rounds), timeout, interval=0.05,
                     what="every message answered")
        except AssertionError:
            missing = chats.missing(rounds)
            got = {text.split()[0]: chats.replies(int(text.split()[0][1:])) for text in missing}
            raise self.failure(f"no reply after {timeout:g} s to {missing}; their chats got "
                               f"{got}") from None

    def close(self) -> None:
        for node in self.nodes:
            node.daemon.close()
