"""Daemons on Redis, end to end: pipeline throughput with 1, 2 and 3 nodes against the file
backend, and failover time (the account's reader SIGKILLed → first reply from the new one).

Real `soulflow run` processes (each with a workspace of its own), the Telegram fake (this
process, on a thread; relaxed limits, so the platform's pacing is not what is measured), the
instant fake model (a process of its own) and a private redis-server with AOF. Every message is
one turn (CHANNEL_FOLD_MAX=1) answered "echo: <text>", so answers are counted exactly.

    python bench/cluster.py throughput [--messages 600] [--chats 20] [--nodes 1 2 3]
                                       [--appendfsync always|everysec] [--runs 1]
    python bench/cluster.py failover [--kills 20] [--ttl 6] [--nodes 3] [--chats 20]

throughput: after a warm-up round, `--messages` mentions over `--chats` chats arrive at once;
msg/s is messages / (last reply − burst), CPU per message counts every daemon and redis-server
(user + system, psutil). failover: each round waits a random part of a TTL (not in step with
the lease renewals), SIGKILLs the reader, posts one message in every chat at once, and times the
first reply and the last of them; then starts the dead node again. Duplicate replies (the
documented window) are counted in both modes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import describe_ms, fake_model_process, percentile  # noqa: E402
from tests.backends.daemon_cluster import (  # noqa: E402
    Cluster,
    Node,
    TelegramChats,
    long_polling_since,
)
from tests.backends.redis_server import RedisServer  # noqa: E402
from tests.e2e.harness import wait_for  # noqa: E402
from tests.fakes.rate_limits import TELEGRAM_LIMITS  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramThread  # noqa: E402


@dataclass
class Rig:
    """One bench setup: the fake, its chats, the nodes, and Redis (None: file backend)."""

    tg: FakeTelegramThread
    chats: TelegramChats
    cluster: Cluster
    nodes: list[Node]
    redis: RedisServer | None

    def cpu_s(self) -> tuple[float, float]:
        """CPU (user + system) so far of every live daemon, and of redis-server."""
        pids = [n.daemon.proc.pid for n in self.nodes if n.alive and n.daemon.proc is not None]
        redis = 0.0
        if self.redis is not None and self.redis.process is not None:
            redis = _cpu(self.redis.process.pid)
        return sum(_cpu(pid) for pid in pids), redis

    def redis_commands(self) -> int:
        """Commands redis-server has processed so far (0 on the file backend)."""
        if self.redis is None:
            return 0
        client = redis.Redis.from_url(self.redis.url)
        try:
            return int(client.info("stats")["total_commands_processed"])
        finally:
            client.close()

    def wait_reader(self, since: float, timeout: float = 60.0) -> None:
        """Until one node reads the account and has started a long poll after `since`."""
        if self.redis is not None:
            self.cluster.wait_one_leader(timeout)
        self.cluster.wait(lambda: long_polling_since(self.tg, since), timeout,
                          "a long poll by the reader")

    def sent_since(self, since: float, prefix: str) -> list[float]:
        """When (monotonic) each reply starting "echo: <prefix>" reached the fake and was
        accepted (a refused send is no reply)."""
        return [r.time for r in self.tg.requests
                if r.method == "sendMessage" and r.time >= since and r.status == 200
                and str(r.params.get("text", "")).startswith(f"echo: {prefix}")]


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


@contextmanager
def rig(tmp: Path, model_url: str, *, nodes: int, chats: int, backend: str,
        appendfsync: str = "always", ttl_s: float = 6.0) -> Iterator[Rig]:
    redis: RedisServer | None = None
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg:
        if backend == "redis":
            redis = RedisServer(tmp / "redis", "--appendonly", "yes", "--appendfsync",
                                appendfsync)
            redis.start()
        chat_set = TelegramChats(tg, chats)
        cluster = Cluster(tmp, redis_url=redis.url if redis else "", llm_url=model_url,
                          prefix=f"bench{uuid.uuid4().hex[:6]}:",
                          platform_env=chat_set.env(), lease_ttl_s=ttl_s,
                          partitions=16, LOG_LEVEL="warning" if backend == "file" else "info",
                          SOULFLOW_BACKEND=backend, AGENT_CONCURRENCY="32")
        members = [cluster.add(f"node{i}") for i in range(nodes)]
        try:
            cluster.start(members)
            bench_rig = Rig(tg, chat_set, cluster, members, redis)
            bench_rig.wait_reader(0.0)
            yield bench_rig
        finally:
            cluster.close()
            if redis is not None:
                redis.stop()


def answered(chats: TelegramChats, rounds: range) -> bool:
    return not chats.missing(rounds)


def replies(r: Rig) -> int:
    """Replies the fake accepted so far: a counter, cheap to poll (reading the sent messages
    copies them on the fake's loop, which would slow the fake the bench measures through)."""
    return int(r.tg.stats()["replies"])


def wait_replies(r: Rig, count: int, timeout: float, what: str) -> None:
    wait_for(lambda: replies(r) >= count, timeout, 0.02, what)


def duplicates(chats: TelegramChats) -> int:
    return sum(len(texts) - len(set(texts)) for texts in chats.all_replies().values())


def throughput_run(model_url: str, backend: str, nodes: int, args: argparse.Namespace
                   ) -> tuple[float, float, float, float, int]:
    """(msg/s, daemons' and redis-server's CPU ms per message, Redis commands per message,
    duplicate replies) of one burst."""
    rounds = max(1, args.messages // args.chats)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, \
            rig(Path(tmp), model_url, nodes=nodes, chats=args.chats, backend=backend,
                appendfsync=args.appendfsync) as r:
        r.chats.post_round(0)  # warm-up: sessions created, connections open
        wait_replies(r, args.chats, 60, "the warm-up answered")
        wait_for(lambda: answered(r.chats, range(1)), 60, 0.05, "the warm-up answered")
        cpu0, commands0, started = r.cpu_s(), r.redis_commands(), time.monotonic()
        for n in range(1, rounds + 1):
            r.chats.post_round(n)
        wait_replies(r, (rounds + 1) * args.chats, args.timeout, "a reply per message")
        wait_for(lambda: answered(r.chats, range(rounds + 1)), args.timeout, 0.5,
                 "every message answered")
        elapsed = max(r.sent_since(started, "c")) - started
        daemons, server = (b - a for a, b in zip(cpu0, r.cpu_s(), strict=True))
        messages = rounds * args.chats
        commands = (r.redis_commands() - commands0) / messages
        return (messages / elapsed, 1000 * daemons / messages, 1000 * server / messages,
                commands, duplicates(r.chats))


def throughput(model_url: str, args: argparse.Namespace) -> None:
    configs = [("file", 1)] + [("redis", n) for n in args.nodes]
    rows: list[tuple[str, ...]] = []
    for backend, nodes in configs:
        for run in range(args.runs):
            rate, daemons, server, commands, dups = throughput_run(model_url, backend, nodes,
                                                                   args)
            label = "file" if backend == "file" else \
                f"redis AOF {args.appendfsync}, {nodes} node{'s' if nodes > 1 else ''}"
            rows.append((label, str(run + 1), f"{rate:,.0f}", f"{daemons + server:.2f}",
                         f"{daemons:.2f}", f"{server:.2f}", f"{commands:.0f}", str(dups)))
            print(f"  {label} run {run + 1}: {rate:,.0f} msg/s, {daemons + server:.2f} ms "
                  f"CPU/msg ({server:.2f} redis-server), {commands:.0f} Redis commands/msg, "
                  f"{dups} duplicates", flush=True)
    header = ("backend", "run", "msg/s", "CPU ms/msg", "daemons", "redis", "cmds/msg",
              "duplicates")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print(f"\n{args.messages // args.chats * args.chats} messages over {args.chats} chats, "
          "each one turn; CPU = every daemon + redis-server")
    for line in (header, *rows):
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))


def failover(model_url: str, args: argparse.Namespace) -> None:
    firsts: list[float] = []
    lasts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp, \
            rig(Path(tmp), model_url, nodes=args.nodes, chats=args.chats, backend="redis",
                ttl_s=args.ttl) as r:
        for kill in range(args.kills):
            time.sleep(random.uniform(0, args.ttl))  # anywhere in the renewal cycle
            doomed = r.cluster.wait_one_leader(60)
            before = replies(r)
            killed_at = doomed.kill()
            for chat in range(args.chats):
                r.tg.push_message(r.chats.ids[chat], f"@soulflow_test_bot k{kill} c{chat}",
                                  from_id=111111, chat_type="supergroup")
            prefix = f"k{kill} "
            wait_replies(r, before + args.chats, 30 + 10 * args.ttl,
                         f"the replies after kill {kill + 1}")
            wait_for(lambda p=prefix, t=killed_at: len(r.sent_since(t, p)) >= args.chats,
                     30 + 10 * args.ttl, 0.2, f"the replies after kill {kill + 1}")
            times = sorted(r.sent_since(killed_at, prefix))
            firsts.append(times[0] - killed_at)
            lasts.append(times[args.chats - 1] - killed_at)
            print(f"  kill {kill + 1} ({doomed.name}): first reply {firsts[-1]:.2f} s, "
                  f"all {args.chats} chats {lasts[-1]:.2f} s", flush=True)
            doomed.start()
            r.wait_reader(0.0)
        dups = duplicates(r.chats)
    print(f"\n{args.kills} SIGKILLs of the reader, {args.nodes} nodes, REDIS_LEASE_TTL_S="
          f"{args.ttl:g}, one message posted in each of {args.chats} chats right after each")
    print(f"first reply after the kill: {describe_ms(firsts)}")
    print(f"every chat answered:        {describe_ms(lasts)}")
    print(f"p50/p99 first reply {percentile(firsts, 0.5):.2f} s / "
          f"{percentile(firsts, 0.99):.2f} s; all chats {statistics.median(lasts):.2f} s / "
          f"{percentile(lasts, 0.99):.2f} s; duplicate replies {dups}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--messages", type=int, default=600)
    tp.add_argument("--chats", type=int, default=20)
    tp.add_argument("--nodes", type=int, nargs="*", default=[1, 2, 3],
                    help="redis runs with this many nodes each (none: the file backend only)")
    tp.add_argument("--appendfsync", choices=["always", "everysec"], default="always")
    tp.add_argument("--runs", type=int, default=1)
    tp.add_argument("--timeout", type=float, default=300.0)
    fo = sub.add_parser("failover")
    fo.add_argument("--kills", type=int, default=20)
    fo.add_argument("--ttl", type=float, default=6.0)
    fo.add_argument("--nodes", type=int, default=3)
    fo.add_argument("--chats", type=int, default=20)
    args = parser.parse_args()
    with fake_model_process() as model_url:
        if args.mode == "throughput":
            throughput(model_url, args)
        else:
            failover(model_url, args)


if __name__ == "__main__":
    main()
