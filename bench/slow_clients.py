"""Slow clients against the dashboard (issue 17, finding 12): what the daemon keeps answering.

`soulflow run` as a subprocess with DASHBOARD_TOKEN set and the soft open-files limit the
daemon is started with (`--soft-nofile`, default 1024 as many systems start processes),
Telegram through its real SDK against the fake (in this process), the fake model. An attacker
holds `--slow` connections that never finish their request heads, from `--sources` loopback
addresses, reopening whatever the daemon closes. Printed: the daemon's open descriptors (idle,
then the peak while attacked), the time `/healthz` takes on a fresh connection from 127.0.0.1,
and the time from a Telegram message to the bot's answer, idle and attacked; a call that gets
no answer within `--give-up` seconds counts as "none".

    python bench/slow_clients.py [--slow 1100] [--sources 40] [--rounds 5] [--soft-nofile 1024]
                                 [--hold 20] [--header-timeout 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.harness import Daemon, base_env  # noqa: E402
from tests.e2e.platform_helpers import TelegramDriver  # noqa: E402
from tests.e2e.slow_clients import SlowClients, loopback_sources  # noqa: E402
from tests.fakes.openai_api import FakeOpenAIThread  # noqa: E402

TOKEN = "bench-slow-clients-token"


def timed(call: Callable[[], bool], give_up: float) -> float | None:
    """Seconds until `call()` is true (polled), or None after `give_up` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < give_up:
        if call():
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def healthz_s(http: httpx.Client, daemon: Daemon) -> float | None:
    """One `/healthz` on a new connection (the client keeps none alive)."""
    start = time.monotonic()
    try:
        ok = http.get(daemon.url + "/healthz").status_code == 200
    except httpx.HTTPError:
        return None
    return time.monotonic() - start if ok else None


def telegram_s(driver: TelegramDriver, text: str, give_up: float) -> float | None:
    posted = driver.post(text)
    return timed(lambda: any(p.text == f"echo: {text}" for p in driver.posts(posted.chat)),
                 give_up)


def describe(values: list[float | None]) -> str:
    answered = [v * 1000 for v in values if v is not None]
    missing = len(values) - len(answered)
    if not answered:
        return f"none answered ({missing}/{len(values)})"
    text = f"median {statistics.median(answered):.0f} ms, max {max(answered):.0f} ms"
    return text + (f", {missing}/{len(values)} none" if missing else "")


def measure(daemon: Daemon, driver: TelegramDriver, label: str, rounds: int,
            give_up: float, peak: list[int]) -> None:
    health, telegram = [], []
    http = httpx.Client(timeout=give_up, limits=httpx.Limits(max_keepalive_connections=0))
    for n in range(rounds):
        health.append(healthz_s(http, daemon))
        peak[0] = max(peak[0], daemon.open_fds())
        telegram.append(telegram_s(driver, f"{label} {n}", give_up))
        peak[0] = max(peak[0], daemon.open_fds())
    http.close()
    print(f"  {label:<9} /healthz  {describe(health)}")
    print(f"  {label:<9} telegram  {describe(telegram)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=1100)
    parser.add_argument("--sources", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--soft-nofile", type=int, default=1024)
    parser.add_argument("--hold", type=float, default=20.0,
                        help="seconds the attack runs before the attacked measurements")
    parser.add_argument("--header-timeout", default="10")
    parser.add_argument("--give-up", type=float, default=20.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIThread() as llm, \
            TelegramDriver() as driver:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=llm.base_url,
                       PHI4_MODEL="fake-model", CHANNEL_SEND_INTERVAL_MS="50",
                       DASHBOARD_TOKEN=TOKEN, DASHBOARD_HEADER_TIMEOUT_S=args.header_timeout,
                       **driver.env())
        daemon = Daemon(workspace, env, Path(tmp) / "daemon.log",
                        soft_open_files=args.soft_nofile)
        try:
            daemon.start()
            driver.wait_ready(daemon)
            idle_fds = daemon.open_fds()
            peak = [idle_fds]
            print(f"slow clients: {args.slow} from {args.sources} address(es), daemon soft "
                  f"open-files limit {args.soft_nofile} at start")
            measure(daemon, driver, "idle", args.rounds, args.give_up, peak)
            port = int(daemon.url.rsplit(":", 1)[1])
            assert daemon.proc is not None
            process = psutil.Process(daemon.proc.pid)
            with SlowClients(port, args.slow, sources=loopback_sources(args.sources)) as slow:
                cpu_before, wall_before = sum(process.cpu_times()[:2]), time.monotonic()
                deadline = time.monotonic() + args.hold
                while time.monotonic() < deadline:  # the attack settles; fds sampled
                    peak[0] = max(peak[0], daemon.open_fds())
                    time.sleep(0.1)
                measure(daemon, driver, "attacked", args.rounds, args.give_up, peak)
                counts = slow.snapshot()
                cpu = (sum(process.cpu_times()[:2]) - cpu_before) / \
                    (time.monotonic() - wall_before)
            print(f"  attacker  held {counts.open} at the end; opened {counts.opened}, closed "
                  f"by the daemon {counts.closed_by_server}, connects failed {counts.failed}")
            print(f"  daemon    open fds idle {idle_fds}, peak while attacked {peak[0]}; "
                  f"CPU while attacked {cpu:.0%} of a core")
            notable = [line for line in daemon.log().splitlines()
                       if "open-files limit" in line or "connection caps" in line
                       or "out of system resource" in line or "Too many open files" in line]
            print(f"  daemon log, {len(notable)} line(s) about descriptors or caps:")
            for line in notable[:3]:
                print(f"    {line.split(' ', 2)[-1][:150]}")
        finally:
            daemon.close()


if __name__ == "__main__":
    main()
