"""A Redis that answers late (far away, or overloaded) slows the chats it holds, never the rest
of the daemon: while a turn, a heartbeat turn, the ops ticks or the dashboard's own page wait
on a Redis 0.3 s away each way, the dashboard answers at once. The agent's stores write behind
and read ahead on the asynchronous client (backends/redis/writeback.py), the loops that scan
runs read them ahead (`find_open`), and the page's other reads run in the backend's store
thread, so no store call holds the event loop; a single call that did would hold every probe
below for 0.6 s. So do the vault's calls (a message carrying a credential, `/secret`), a plan
under review offered and answered, and `/stop`'s scan of its chat's tasks."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.backends.node_daemons import node_daemons
from tests.backends.proxy import ProxyThread
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import wait_for
from tests.fakes.openai_api import FakeOpenAIThread
from tests.security.samples import OPENAI_KEY

pytestmark = pytest.mark.timeout(120)

ONE_WAY_S = 0.3


def _settings(proxy: ProxyThread, **extra: str) -> dict[str, str]:
    return {"SOULFLOW_BACKEND": "redis", "REDIS_URL": proxy.url,
            "REDIS_KEY_PREFIX": f"slow{uuid.uuid4().hex[:8]}:",
            "REDIS_PARTITIONS": "4", "STREAM_REPLIES": "off",
            # leases sized for a Redis this far away: renewed in time, never moved
            "REDIS_LEASE_TTL_S": "20", **extra}


@contextmanager
def redis_far_away(tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer,
                   **extra: str) -> Iterator[tuple[Any, ProxyThread]]:
    """A node (not started) whose Redis is behind a proxy that adds no delay yet."""
    proxy = ProxyThread(redis_server.port)
    try:
        with node_daemons(tmp_path, fake_llm.base_url, ("node-a",),
                          **_settings(proxy, **extra)) as nodes:
            yield nodes["node-a"], proxy
    finally:
        proxy.close()


def started_warm(daemon: Any) -> Any:
    """Start the node and get one reply in chat "slow" before Redis turns slow."""
    node = daemon.start()
    node.wait_reply(node.say("warm up", chat_id="slow"), chat_id="slow", timeout=30)
    return node


def test_a_slow_redis_slows_its_chats_never_the_dashboard(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    with redis_far_away(tmp_path, fake_llm, redis_server) as (daemon, proxy):
        node = started_warm(daemon)
        proxy.delay(ONE_WAY_S)
        started = time.monotonic()
        message_id = node.say("hello", chat_id="slow")
        probes: list[float] = []
        while not any(m.get("reply_to") == message_id for m in node.replies("slow")):
            assert time.monotonic() - started < 60, "no reply through the slow Redis"
            sent = time.monotonic()
            assert node.api("GET", "/healthz").status_code == 200
            probes.append(time.monotonic() - sent)
            time.sleep(0.05)
        took = time.monotonic() - started
        proxy.delay(0)
        assert took > 4 * ONE_WAY_S, "the turn did not wait for Redis at all"
        assert len(probes) >= 5
        assert max(probes) < 2 * ONE_WAY_S, \
            f"the dashboard waited {max(probes):.2f} s: something held the event loop"
        assert node.stop() == 0


def test_the_page_the_heartbeat_and_ops_wait_on_a_slow_redis_without_holding_the_loop(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    """`/api/state` reads sessions, tasks, cron, decisions, usage and the open runs; a
    heartbeat turn reads its session and its chat's runs; an ops tick scans the running runs
    and refreshes the decisions. Through the slow Redis each takes its round trips, and
    `/healthz` is answered at once all along."""
    with redis_far_away(tmp_path, fake_llm, redis_server, HEARTBEAT_INTERVAL="2s",
                        OPS_TICK_S="1") as (daemon, proxy):
        (daemon.workspace / "HEARTBEAT.md").write_text("- check the disk space\n",
                                                      encoding="utf-8")
        node = daemon.start()
        first = node.state()
        node.wait_reply(node.say("warm up", chat_id="slow"), chat_id="slow", timeout=30)
        proxy.delay(ONE_WAY_S)
        pages: list[tuple[float, dict[str, Any]]] = []

        def read_pages() -> None:  # until a heartbeat turn and two ops ticks went by
            while True:
                sent = time.monotonic()
                state = node.state()
                pages.append((time.monotonic() - sent, state))
                if state["heartbeat"]["model_calls"] > first["heartbeat"]["model_calls"] \
                        and state["ops"]["ticks"] >= first["ops"]["ticks"] + 2:
                    return

        reader = threading.Thread(target=read_pages, daemon=True)
        reader.start()
        probes: list[float] = []
        started = time.monotonic()
        while reader.is_alive():
            assert time.monotonic() - started < 90, "no heartbeat turn through the slow Redis"
            sent = time.monotonic()
            assert node.api("GET", "/healthz").status_code == 200
            probes.append(time.monotonic() - sent)
            time.sleep(0.05)
        proxy.delay(0)
        assert len(probes) >= 5
        assert max(took for took, _ in pages) > 2 * ONE_WAY_S, \
            "the page did not wait for Redis at all"
        assert max(probes) < 2 * ONE_WAY_S, \
            f"the dashboard waited {max(probes):.2f} s: something held the event loop"
        assert node.stop() == 0


class Probes:
    """`/healthz` asked every 50 ms from a thread, each answer's time noted under the step
    the test is at: a store call that held the event loop for one round trip (0.6 s) makes
    the probe sent as it began wait that long."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self.step = "start"
        self.taken: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            step, sent = self.step, time.monotonic()
            assert self._node.api("GET", "/healthz").status_code == 200
            self.taken.setdefault(step, []).append(time.monotonic() - sent)
            time.sleep(0.05)

    def worst(self) -> tuple[str, float]:
        return max(((step, max(times)) for step, times in self.taken.items()),
                   key=lambda found: found[1])


@pytest.mark.timeout(300)
def test_secrets_plans_and_stop_wait_on_a_slow_redis_without_holding_the_loop(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    """What calls the vault and the plans under review, through a Redis 0.3 s away each way:
    a message carrying an API key (sealed into the vault at intake, its reference opened for
    the turn), `/secret set` (stored at intake, then checked by the command), a plan with a
    gate offered for review and approved, and `/stop` in the chat where the task waits at
    its gate (its unfinished tasks scanned). `/healthz` is answered at once all along."""
    with redis_far_away(tmp_path, fake_llm, redis_server) as (daemon, proxy):
        node = started_warm(daemon)
        proxy.delay(ONE_WAY_S)
        with Probes(node) as probes:
            probes.step = "a message carrying an API key"
            node.wait_reply(node.say(f"use this key: {OPENAI_KEY}", chat_id="slow"),
                            chat_id="slow", timeout=60)
            probes.step = "/secret set"
            stored = node.wait_reply(node.say("/secret set SLOW_TOKEN s3cr3t-value-9876",
                                              chat_id="slow"), chat_id="slow", timeout=60)
            assert stored["content"].startswith("Stored secret SLOW_TOKEN"), stored
            probes.step = "a plan offered for review"
            fake_llm.script_reply(json.dumps({"title": "Mail after OK", "nodes": [
                {"id": "ok", "kind": "approval", "prompt": "Send the mail?"},
                {"id": "think", "kind": "agent", "goal": "Draft it", "tools": [],
                 "depends_on": ["ok"]}]}))
            shown = node.wait_reply(node.say("/task mail the vendors", chat_id="slow"),
                                    chat_id="slow", timeout=60)
            assert shown["content"].startswith("Plan: Mail after OK"), shown
            probes.step = "the plan approved"
            started = node.wait_reply(node.say("approve", chat_id="slow"),
                                      chat_id="slow", timeout=60)
            assert started["content"].startswith("Started task t-"), started
            wait_for(lambda: any("waits for approval at step ok" in r["content"]
                                 for r in node.replies("slow")), 60,
                     what="the task waiting at its gate")
            probes.step = "/stop"
            stopped = node.wait_reply(node.say("/stop", chat_id="slow"),
                                      chat_id="slow", timeout=60)
            assert stopped["content"] == "Stopped 1 running task(s).", stopped
        proxy.delay(0)
        assert set(probes.taken) >= {"a message carrying an API key", "/secret set",
                                     "a plan offered for review", "/stop"}
        step, worst = probes.worst()
        steps = {name: round(max(times), 2) for name, times in probes.taken.items()}
        assert worst < 1.5 * ONE_WAY_S, \
            f"the dashboard waited {worst:.2f} s during {step!r} (each step's longest " \
            f"wait: {steps}): something held the event loop"
        shown_text = json.dumps(node.transcript("slow"))
        assert OPENAI_KEY not in shown_text and "s3cr3t-value-9876" not in shown_text
        assert node.stop() == 0
