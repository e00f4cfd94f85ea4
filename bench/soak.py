"""The soak: one daemon for hours on Telegram, Slack and Discord (each its real SDK against its
fake, in its own process) and the local chat, at a steady rate, with faults and restarts.

Messages `soak <n>` go round-robin to the four channels at `--rate` per second (1% of the
platform ones are `/stop`); about every `--fault-every` seconds a platform fake injects a fault
(a 500 on a send, a dropped long poll / Socket Mode / gateway connection, or a 429 with
`retry_after`); at the minutes of `--restarts` the daemon is stopped (`term`: SIGTERM, `kill`:
SIGKILL) and started again while the platforms keep receiving messages. The fake model echoes
what it answers, so each message's number shows in the reply that answers it, as the platform
(or the local transcript) received it.

Every `--report-every` seconds one JSON line goes to `--out` (and a table row to stdout):
`minute, life` (daemon start number), `pid, injected, answered, duplicates, unanswered`
(not answered yet), `rss_mib, fds, connections, tasks, cpu_ms_per_msg` (the daemon's CPU in the
interval over the messages injected in it), `cpu_s` (the run's total so far), `faults`,
`dlq_out, dlq_in, runtime_mib` (the size of `runtime/`). At the end, after the daemon has
settled, a `summary` line: totals, lost messages, and the steady window (the daemon life that
runs through minute `--steady-from`, from that minute to its last report): RSS, fds, tasks
and connections at its start and end, and their growth. `bench/soak_plot.py` draws the curves.

    python bench/soak.py [--duration 7200] [--rate 20] [--out soak.jsonl]
                         [--restarts 1:kill,2:term,110:kill] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._burst_probe import (  # noqa: E402
    DaemonProbe,
    FakeHostProcess,
    daemon_env,
    dead_letters,
    wait_until,
)
from bench._common import fake_model_process  # noqa: E402
from bench._soak_tally import (  # noqa: E402
    PREFIX,
    JournalStatuses,
    LocalChats,
    session_statuses,
    steady_window,
    tree_mib,
)
from tests.e2e.harness import Daemon  # noqa: E402

PLATFORMS = ("telegram", "slack", "discord")
FAULTS = ("500", "drop", "429")


@dataclass
class Restart:
    minute: float
    how: str  # "term" or "kill"


def parse_restarts(text: str, duration_s: float) -> list[Restart]:
    """`3:kill,6:term` (minutes); `auto`: a SIGKILL at minute 1 and a SIGTERM at 2, early so
    the daemon that runs through the steady window has filled most of its bounded caches by
    minute 15 (they take about 14 minutes at 20 msg/s: the outbox's 10,000 answered keys, the
    Discord adapter's 5,000 recent keys, SQLite's page cache), and a SIGKILL ten minutes before
    the end of a run of an hour or more (a start with a full runtime/)."""
    if text == "none":
        return []
    if text == "auto":
        minutes = duration_s / 60
        if minutes < 20:
            return [Restart(minutes * 0.2, "kill"), Restart(minutes * 0.4, "term")]
        found = [Restart(1, "kill"), Restart(2, "term")]
        if minutes >= 60:
            found.append(Restart(minutes - 10, "kill"))
        return found
    restarts = []
    for item in text.split(","):
        minute, _, how = item.partition(":")
        if how not in ("kill", "term"):
            raise ValueError(f"restart {item!r}: say kill or term")
        restarts.append(Restart(float(minute), how))
    return sorted(restarts, key=lambda r: r.minute)


class Soak:
    """The run: the fakes, the daemon (restarted in a thread while traffic goes on), the
    traffic, the reports."""

    def __init__(self, args: argparse.Namespace, hosts: list[FakeHostProcess],
                 daemon: Daemon, out: TextIO) -> None:
        self.args = args
        self.hosts = hosts
        self.daemon = daemon
        self.out = out
        self.rng = random.Random(args.seed)
        self.local = LocalChats(daemon.workspace, args.chats) if args.local else None
        self.journal = JournalStatuses(daemon.workspace / "runtime" / "bus" / "inbound.jsonl")
        self.restarts = parse_restarts(args.restarts, args.duration)
        self.life = 1
        self.up = threading.Event()
        self.probe: DaemonProbe | None = None
        self.cpu_before = 0.0  # CPU of the daemon's earlier lives
        self.injected = self.faults = self.stops = 0
        self.reports: list[dict[str, Any]] = []
        self._last: tuple[float, int] = (0.0, 0)  # cpu_s, injected at the last report
        self._lock = threading.Lock()

    # -- the daemon ----------------------------------------------------------------------

    def start_daemon(self) -> None:
        self.daemon.start()
        for host in self.hosts:
            if not wait_until(lambda h=host: h.call("ready"), 60):
                raise RuntimeError(f"the daemon never connected to the {host.platform} fake")
        assert self.daemon.proc is not None
        with self._lock:
            self.probe = DaemonProbe(self.daemon.proc.pid)
            self.probe.mark()
        self.up.set()

    def restart(self, how: str) -> None:
        """Stop (SIGTERM, waiting for a clean exit) or kill, then start again."""
        with self._lock:
            assert self.probe is not None
            self.cpu_before += self._cpu_now()
            self.up.clear()
            self.probe = None
        if how == "kill":
            self.daemon.kill()
        else:
            self.daemon.stop(signal.SIGTERM, timeout=60)
        self.life += 1
        self.start_daemon()
        print(f"  -- restarted ({how}): life {self.life}, pid {self.daemon.proc.pid}",
              flush=True)

    def _cpu_now(self) -> float:
        try:
            return self.probe.cpu_s() if self.probe is not None else 0.0
        except Exception:  # the process is gone: its CPU was counted at the last report
            return 0.0

    # -- traffic -------------------------------------------------------------------------

    def inject_one(self) -> None:
        n = self.injected
        targets = len(self.hosts) + (1 if self.local is not None else 0)
        slot = n % targets
        index = self.rng.randrange(self.args.chats)
        if slot == len(self.hosts):
            if self.up.is_set() and self.local is not None:
                self.local.post(self.daemon.url, index, n)
        else:
            host = self.hosts[slot]
            if self.rng.random() < self.args.stop_share:
                host.call("post", index=index, text="/stop")
                self.stops += 1
            else:
                host.call("post", index=index, text=f"{PREFIX} {n}", number=n)
        self.injected += 1
        if self.rng.random() < 1.0 / (self.args.fault_every * self.args.rate):
            self.rng.choice(self.hosts).call("fault", kind=self.rng.choice(FAULTS))
            self.faults += 1

    def tally(self, full: bool = False) -> dict[str, Any]:
        """Counts over every channel; with `full`, every unanswered number, and how many of
        them a `/stop` cancelled (the journal, or the session if a compaction took the
        journal's entry, says `cancelled`): the rest are lost."""
        parts = [h.call("tally", prefix=PREFIX, full=full) for h in self.hosts]
        if self.local is not None:
            parts.append(self.local.tally(full))
        counts: dict[str, Any] = {key: sum(p[key] for p in parts) for key in
                                  ("posted", "answered", "duplicate_count", "missing_count")}
        counts["duplicates"] = [n for p in parts for n in p["duplicates"]][:50]
        missing = [n for p in parts for n in p["missing"]]
        if full:
            self.journal.refresh()
            recorded = session_statuses(self.daemon.workspace / "runtime" / "sessions", {
                n for n in missing if self.journal.status.get(n) != "cancelled"})
            stopped = [n for n in missing if "cancelled" in (self.journal.status.get(n),
                                                              recorded.get(n))]
            lost = sorted(set(missing) - set(stopped))
            counts.update(stopped=len(stopped), lost=len(lost), lost_ids=lost[:50])
        counts["missing"] = missing[:50]
        return counts

    # -- reports -------------------------------------------------------------------------

    def report(self, started: float) -> dict[str, Any]:
        counts = self.tally()
        row: dict[str, Any] = {"minute": round((time.monotonic() - started) / 60, 2),
                               "life": self.life, "injected": self.injected,
                               "answered": counts["answered"],
                               "duplicates": counts["duplicate_count"],
                               "unanswered": counts["missing_count"], "faults": self.faults}
        with self._lock:
            probe = self.probe if self.up.is_set() else None
            if probe is not None:
                sample = probe.sample()
                cpu_s = self.cpu_before + probe.cpu_s()
                row.update(pid=probe.proc.pid, rss_mib=round(sample.rss_mib, 2),
                           fds=sample.fds, connections=sample.connections)
        if probe is not None:
            try:
                row["tasks"] = int(self.daemon.state().get("tasks", -1))
            except (httpx.HTTPError, ValueError):
                row["tasks"] = None
            last_cpu, last_injected = self._last
            row["cpu_s"] = round(cpu_s, 2)
            row["cpu_ms_per_msg"] = round(
                1000 * (cpu_s - last_cpu) / max(self.injected - last_injected, 1), 3)
            self._last = (cpu_s, self.injected)
        dlq = dead_letters(self.daemon.workspace)
        row.update(dlq_out=dlq["outbound"], dlq_in=dlq["inbound"],
                   runtime_mib=round(tree_mib(self.daemon.workspace / "runtime"), 2))
        self.reports.append(row)
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()
        print("  " + "  ".join(f"{row.get(k, '-')!s:>{w}}" for k, w in COLUMNS), flush=True)
        return row

    # -- the run -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        args = self.args
        print(f"soak: {args.duration / 60:.0f} min at {args.rate:g} msg/s over "
              f"{', '.join(h.platform for h in self.hosts)}"
              f"{' and local' if self.local else ''}; restarts "
              f"{', '.join(f'{r.how} at {r.minute:g} min' for r in self.restarts) or 'none'}; "
              f"seed {args.seed}", flush=True)
        print("  " + "  ".join(f"{k:>{w}}" for k, w in COLUMNS), flush=True)
        self.start_daemon()
        started = time.monotonic()
        next_report = started + args.report_every
        pending_restarts = list(self.restarts)
        restarter: threading.Thread | None = None
        interval = 1.0 / args.rate
        while (now := time.monotonic()) - started < args.duration:
            if (pending_restarts and now - started >= pending_restarts[0].minute * 60
                    and (restarter is None or not restarter.is_alive())):
                how = pending_restarts.pop(0).how
                restarter = threading.Thread(target=self.restart, args=(how,), daemon=True)
                restarter.start()
            self.inject_one()
            if now >= next_report:
                next_report += args.report_every
                self.report(started)
            time.sleep(max(0.0, started + self.injected * interval - time.monotonic()))
        if restarter is not None:
            restarter.join()
        settled = wait_until(self._settled, args.settle, interval=2.0)
        final = self.report(started)
        return self.summary(final, settled)

    def _settled(self) -> bool:
        try:
            queues = self.daemon.state()["queues"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        return (queues["outbox_pending"] == 0 and queues["outbound_queued"] == 0
                and queues["inbound_pending"] == 0 and self.tally(full=True)["lost"] == 0)

    def summary(self, final: dict[str, Any], settled: bool) -> dict[str, Any]:
        counts = self.tally(full=True)
        window = steady_window(self.reports, self.args.steady_from)
        summary: dict[str, Any] = {
            "summary": True, "duration_min": self.args.duration / 60, "rate": self.args.rate,
            "injected": self.injected, "stops": self.stops, "faults": self.faults,
            "restarts": [f"{r.how}@{r.minute:g}" for r in self.restarts],
            "numbered": counts["posted"], "answered": counts["answered"],
            "duplicates": counts["duplicate_count"], "duplicate_ids": counts["duplicates"],
            "stopped": counts["stopped"], "lost": counts["lost"],
            "lost_ids": counts["lost_ids"], "settled": settled,
            "cpu_ms_per_msg": round(1000 * final.get("cpu_s", 0.0) / max(self.injected, 1), 3),
            "dlq_out": final["dlq_out"], "dlq_in": final["dlq_in"],
            "runtime_mib": final["runtime_mib"], "steady": window}
        self.out.write(json.dumps(summary) + "\n")
        self.out.flush()
        print(f"\nsoak summary: {self.injected} injected ({self.stops} /stop), "
              f"{counts['answered']}/{counts['posted']} numbered messages answered, "
              f"{counts['duplicate_count']} answered twice, {counts['stopped']} cancelled by "
              f"a /stop, {counts['lost']} lost{'' if settled else ' (not settled)'}, "
              f"{self.faults} faults, {len(self.restarts)} restarts; daemon CPU "
              f"{summary['cpu_ms_per_msg']:.2f} ms/msg; dead letters "
              f"{final['dlq_out']}/{final['dlq_in']}; runtime/ {final['runtime_mib']:.0f} MiB")
        if window:
            print(f"  steady window (life {window['life']}, minute {window['from_minute']:g} -> "
                  f"{window['to_minute']:g}): RSS {window['rss_mib'][0]:.1f} -> "
                  f"{window['rss_mib'][1]:.1f} MiB ({window['rss_growth_mib']:+.1f}), fds "
                  f"{window['fds']}, connections {window['connections']}, tasks "
                  f"{window['tasks']} (first, last, min, max)")
        return summary


COLUMNS = (("minute", 6), ("life", 4), ("injected", 8), ("answered", 8), ("duplicates", 10),
           ("unanswered", 10), ("faults", 6), ("rss_mib", 7), ("fds", 4), ("connections", 11),
           ("tasks", 5), ("cpu_ms_per_msg", 14), ("dlq_out", 7), ("dlq_in", 6),
           ("runtime_mib", 11))


@contextmanager
def workdir(path: str | None) -> Iterator[Path]:
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            yield Path(tmp)


def run(args: argparse.Namespace) -> int:
    platforms = PLATFORMS if args.platform == "all" else (args.platform,)
    with ExitStack() as stack:
        directory = stack.enter_context(workdir(args.workdir))
        model_url = stack.enter_context(fake_model_process())
        hosts = []
        for platform in platforms:
            host = FakeHostProcess(platform, args.chats, limits=not args.no_limits)
            stack.callback(host.close)
            hosts.append(host)
        workspace = directory / "ws"
        workspace.mkdir(exist_ok=True)
        env: dict[str, str] = {}
        for host in hosts:
            env.update(host.env)
        env.update(dict(item.split("=", 1) for item in args.env))
        daemon = Daemon(workspace, daemon_env(workspace, model_url, env,
                                              LOG_LEVEL=args.log_level),
                        directory / "daemon.log")
        stack.callback(daemon.close)
        out_path = Path(args.out) if args.out else directory / "soak.jsonl"
        out = stack.enter_context(out_path.open("a", encoding="utf-8"))
        soak = Soak(args, hosts, daemon, out)
        if soak.local is not None:
            stack.callback(soak.local.close)
        summary = soak.run()
        print(f"reports in {out_path}; daemon log in {directory / 'daemon.log'}")
    return 0 if summary["settled"] else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of traffic")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second, in all")
    parser.add_argument("--platform", default="all", choices=(*PLATFORMS, "all"))
    parser.add_argument("--no-local", dest="local", action="store_false",
                        help="leave the local chat out")
    parser.add_argument("--chats", type=int, default=20, help="chats per channel")
    parser.add_argument("--restarts", default="auto",
                        help="minute:kill|term,... (auto: see restarts above; none)")
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds, on average")
    parser.add_argument("--stop-share", type=float, default=0.01,
                        help="share of platform messages that are /stop")
    parser.add_argument("--report-every", type=float, default=60.0)
    parser.add_argument("--steady-from", type=float, default=15.0,
                        help="minute from which growth counts (caches fill before)")
    parser.add_argument("--settle", type=float, default=300.0,
                        help="seconds to wait at the end for every message to be answered")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--no-limits", action="store_true",
                        help="fakes accept every send (no platform pacing)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a daemon setting (repeatable)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--workdir", help="keep the workspace and the daemon's log here")
    parser.add_argument("--out", help="JSON lines (default: soak.jsonl in the work dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
