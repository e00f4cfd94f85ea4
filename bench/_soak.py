"""`platform_burst.py --soak`: one daemon on all three fakes for a long while, mixed traffic at a
steady rate with `/stop`s and injected faults (500s, dropped connections, 429s), printing RSS,
sockets, file descriptors and asyncio tasks every `--report-every` seconds. Leaks show as growth
between the first and the last report; the bench judges nothing, it prints."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from bench._burst_probe import (
    DaemonProbe,
    FakeHostProcess,
    JournalCount,
    daemon_env,
    dead_letters,
    wait_until,
)
from tests.e2e.harness import Daemon

FAULTS = ("500", "drop", "429")


def soak(platforms: tuple[str, ...], model_url: str, args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    hosts = [FakeHostProcess(p, args.chats, limits=not args.no_limits) for p in platforms]
    tmp = tempfile.TemporaryDirectory(prefix="soak-")
    workspace = Path(tmp.name) / "ws"
    workspace.mkdir()
    env: dict[str, str] = {}
    for host in hosts:
        env.update(host.env)
    env.update(dict(item.split("=", 1) for item in args.env))
    daemon = Daemon(workspace, daemon_env(workspace, model_url, env, LOG_LEVEL=args.log_level),
                    Path(tmp.name) / "daemon.log")
    try:
        daemon.start()
        for host in hosts:
            if not wait_until(lambda h=host: h.call("ready"), 30):
                raise RuntimeError(f"the daemon never connected to the {host.platform} fake")
        assert daemon.proc is not None
        probe = DaemonProbe(daemon.proc.pid)
        journal = JournalCount(workspace / "runtime" / "bus" / "inbound.jsonl")
        _drive(daemon, hosts, probe, journal, rng, args)
    finally:
        daemon.close()
        for host in hosts:
            host.close()
        if args.keep_logs:
            print(f"logs kept in {tmp.name}")
        else:
            tmp.cleanup()
    return 0


def _drive(daemon: Daemon, hosts: list[FakeHostProcess], probe: DaemonProbe,
           journal: JournalCount, rng: random.Random, args: argparse.Namespace) -> None:
    print(f"soak: {args.duration:.0f} s, {args.rate:g} msg/s over "
          f"{', '.join(h.platform for h in hosts)}, seed {args.seed}")
    print("    min  injected  answered  sent  dlq out/in  faults  rss MiB  conns  fds  tasks")
    started = time.monotonic()
    next_report = started + args.report_every
    interval = 1.0 / args.rate
    injected = faults = 0
    reports: list[tuple[float, int, int, int]] = []
    probe.mark()
    while (now := time.monotonic()) - started < args.duration:
        host = hosts[injected % len(hosts)]
        text = "/stop" if rng.random() < 0.02 else f"soak message {injected}"
        host.call("post", index=rng.randrange(args.chats), text=text)
        injected += 1
        if rng.random() < 0.01:  # about one fault every 20 s at 5 msg/s
            rng.choice(hosts).call("fault", kind=rng.choice(FAULTS))
            faults += 1
        if now >= next_report:
            next_report += args.report_every
            reports.append(_report(daemon, probe, journal, injected, faults, started, now))
        time.sleep(max(0.0, started + injected * interval - time.monotonic()))
    wait_until(lambda: _settled(daemon), 120, interval=1.0)
    reports.append(_report(daemon, probe, journal, injected, faults, started, time.monotonic()))
    first, last = reports[0], reports[-1]
    print(f"\nsoak summary: {injected} injected, {len(journal.done)} done "
          f"({journal.statuses()}), {faults} faults, "
          f"dead letters {dead_letters(daemon.workspace)}; "
          f"daemon CPU {1000 * probe.cpu_s() / max(injected, 1):.2f} ms/msg")
    print(f"  first -> last report: RSS {first[0]:.0f} -> {last[0]:.0f} MiB, sockets "
          f"{first[1]} -> {last[1]}, fds {first[2]} -> {last[2]}, tasks {first[3]} -> {last[3]}")
    sys.stdout.flush()


def _settled(daemon: Daemon) -> bool:
    queues = daemon.state()["queues"]
    return (queues["outbox_pending"] == 0 and queues["outbound_queued"] == 0
            and queues["inbound_pending"] == 0)


def _report(daemon: Daemon, probe: DaemonProbe, journal: JournalCount, injected: int,
            faults: int, started: float, now: float) -> tuple[float, int, int, int]:
    journal.refresh()
    sample = probe.sample()
    state = daemon.state()
    tasks = int(state.get("tasks", -1))
    dlq = dead_letters(daemon.workspace)
    print(f"  {(now - started) / 60:5.1f}  {injected:8d}  {journal.answered:8d}  "
          f"{state['counters'].get('sent', 0):4d}  {dlq['outbound']:>4}/{dlq['inbound']:<4}  "
          f"{faults:6d}  {sample.rss_mib:7.1f}  {sample.connections:5d}  {sample.fds:3d}  "
          f"{tasks:5d}")
    sys.stdout.flush()
    return sample.rss_mib, sample.connections, sample.fds, tasks
