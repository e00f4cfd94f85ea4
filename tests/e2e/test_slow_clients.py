"""Issue 17, finding 12, through the real daemon: 1,100 connections to the dashboard that never
finish their request heads must not starve it.

`soulflow run` with DASHBOARD_TOKEN set (opening a connection needs no token), a soft
open-files limit of 1024 as many systems start processes with, and Telegram through its real
SDK against the fake. An attacker holds 1,100 slow connections from 40 loopback addresses
(reconnecting whatever the daemon closes). Meanwhile Telegram messages are answered, `/healthz`
answers the operator, and the daemon's descriptors stay bounded by the dashboard's caps.
Before the fix the daemon ran out of descriptors: accept failed, and so did everything else
that needed a new file or socket.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Daemon, wait_for
from tests.e2e.platform_helpers import TelegramDriver
from tests.e2e.slow_clients import SlowClients, loopback_sources
from tests.e2e.test_platforms import Live, daemon_env
from tests.fakes.openai_api import FakeOpenAIThread

SLOW = 1100
SOFT_OPEN_FILES = 1024
MAX_CONNECTIONS = 256
#: the listening socket's backlog: the event loop accepts up to this many connections per
#: turn, the dashboard sees them two turns later and the ones over a cap are closed a turn
#: after that, so during a flood up to three batches are briefly open on top of the cap
ACCEPT_BATCH = 128
TOKEN = "slow-clients-token-5e6f7a8b"


@pytest.fixture
def telegram(fake_llm: FakeOpenAIThread, tmp_path: Path) -> Iterator[Live]:
    with TelegramDriver() as driver:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = daemon_env(workspace, fake_llm, driver)
        env.update(DASHBOARD_TOKEN=TOKEN, DASHBOARD_HEADER_TIMEOUT_S="2",
                   DASHBOARD_MAX_CONNECTIONS=str(MAX_CONNECTIONS))
        daemon = Daemon(workspace, env, tmp_path / "daemon.log",
                        soft_open_files=SOFT_OPEN_FILES)
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield Live(driver, daemon, fake_llm)
        finally:
            daemon.close()


def healthz(daemon: Daemon) -> httpx.Response:
    """`/healthz` on a fresh connection from the operator's address (127.0.0.1)."""
    with httpx.Client(timeout=15, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        return http.get(daemon.url + "/healthz")


def test_slow_connections_do_not_starve_the_daemon(telegram: Live) -> None:
    daemon = telegram.daemon
    first = telegram.driver.post("before the slow clients")
    telegram.echo(first, "before the slow clients")
    idle_fds = peak_fds = daemon.open_fds()

    def sampling(predicate: Callable[[], bool]) -> Callable[[], bool]:
        """`predicate`, also noting the daemon's descriptors each time it is asked."""
        def check() -> bool:
            nonlocal peak_fds
            peak_fds = max(peak_fds, daemon.open_fds())
            return predicate()
        return check

    port = int(daemon.url.rsplit(":", 1)[1])
    with SlowClients(port, SLOW, sources=loopback_sources(40)) as slow:
        wait_for(sampling(lambda: slow.snapshot().opened + slow.snapshot().failed >= SLOW), 60,
                 what=f"{SLOW} slow connections to be attempted")
        for round_ in range(3):  # while the attacker keeps reconnecting what is closed
            assert healthz(daemon).status_code == 200
            asked = telegram.driver.post(f"while slow clients wait {round_}")
            reply = f"echo: while slow clients wait {round_}"
            telegram.wait(sampling(lambda text=reply, chat=asked.chat: any(
                p.text == text for p in telegram.posts(chat))), f"the reply {round_}",
                timeout=30)
        # the caps hold through many rounds of the attacker reconnecting what was closed
        wait_for(sampling(lambda: slow.snapshot().closed_by_server >= 2 * SLOW), 120,
                 what="the daemon to close the slow connections again and again")
        assert healthz(daemon).status_code == 200
        assert daemon.alive()
    assert peak_fds <= idle_fds + MAX_CONNECTIONS + 3 * ACCEPT_BATCH + 32, (idle_fds, peak_fds)
    log = daemon.log()
    assert f"open-files limit raised from {SOFT_OPEN_FILES} to" in log
    assert "at its connection caps" in log
    assert "out of system resource" not in log and "Too many open files" not in log
    after = telegram.driver.post("after the slow clients")
    telegram.echo(after, "after the slow clients")
    metrics = daemon.api("GET", "/metrics").text
    evicted = re.search(r'^soulflow_dashboard_connections_closed_total\{reason="evicted"\} (\d+)',
                        metrics, re.M)
    assert evicted is not None and int(evicted.group(1)) > 0
