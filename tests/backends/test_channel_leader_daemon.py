"""`soulflow run` with SOULFLOW_BACKEND=redis, two daemons on one Telegram bot: one polls (the
leader of `account:telegram`), the other shows the channel on standby and polls nothing; after
a SIGKILL of the leader the other takes the account over, reads on from the stored offset and
answers, and the Bot API never saw two pollers at once (no 409)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

from tests.backends.node_daemons import node_daemons
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, wait_for
from tests.fakes.openai_api import FakeOpenAIThread
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread

USER = 111111


def telegram(node: Daemon) -> dict[str, Any]:
    (channel,) = [c for c in node.state()["channels"] if c["name"] == "telegram"]
    return channel


def test_one_daemon_polls_the_bot_and_the_other_takes_over_after_a_sigkill(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg, \
            contextlib.ExitStack() as stack:
        settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                    "REDIS_KEY_PREFIX": f"c{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "2",
                    "REDIS_LEASE_TTL_S": "1", "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
                    "CHANNEL_POLL_TIMEOUT_S": "1", "TELEGRAM_ALLOWED_USERS": str(USER)}
        nodes = stack.enter_context(node_daemons(
            tmp_path, fake_llm.base_url,
            per_node=lambda name: {"TELEGRAM_API_URL": f"{tg.url}/i/{name}"},  # polls per node
            **settings))
        nodes["node-a"].start()
        wait_for(lambda: telegram(nodes["node-a"])["role"] == "leader"
                 and telegram(nodes["node-a"])["status"] == "connected",
                 what="node-a reading the bot")
        nodes["node-b"].start()
        wait_for(lambda: telegram(nodes["node-b"])["status"] == "standby",
                 what="node-b on standby")
        leader, standby = nodes["node-a"], nodes["node-b"]
        token = telegram(leader)["lease_token"]

        tg.push_message(USER, "first", from_id=USER)
        wait_for(lambda: tg.sent_texts(USER) == ["echo: first"], what="the first answer")
        assert tg.polls_by().get("node-b", 0) == 0
        assert telegram(standby)["role"] == "standby" and telegram(standby)["lease_token"] is None

        leader.kill()
        wait_for(lambda: telegram(standby)["role"] == "leader"
                 and telegram(standby)["status"] == "connected", what="node-b taking over")
        assert telegram(standby)["lease_token"] > token
        tg.push_message(USER, "second", from_id=USER)
        wait_for(lambda: tg.sent_texts(USER) == ["echo: first", "echo: second"],
                 what="the second answer, from node-b")
        assert tg.polls_by()["node-b"] > 0
        assert tg.stats()["conflicts"] == 0
        assert standby.stop() == 0
