"""A burst of mentions on Telegram, Slack and Discord, each through its real SDK against a fake
that enforces the platform's send limits (issue 13's benchmark).

Per platform and run: a fresh workspace, the fake in its own process, the instant fake model in
another, and `soulflow run` as a subprocess. `--messages` mentions over `--chats` chats arrive in
one burst; the bench waits until the platform has received an answer to every one (or nothing
moves for `--stall` seconds, or `--timeout` passes) and reports messages answered as the
platform saw it (a reply in the message's chat that echoes it), as the daemon's journal says,
reply messages the platform accepted, dead letters, 429s provoked on replies, time vs the
platform's pacing floor, daemon CPU per inbound message, peak RSS, fds and sockets.

    python bench/platform_burst.py [--platform telegram|slack|discord|all] [--runs 5]
                                   [--messages 2000] [--chats 20]
                                   [--slow-model WORDS,SECONDS]  (replies stream)
    python bench/platform_burst.py --soak [--duration 1800] [--rate 5]   (= bench/soak.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._burst_probe import (  # noqa: E402
    DaemonProbe,
    FakeHostProcess,
    JournalCount,
    daemon_env,
    dead_letters,
    wait_until,
)
from bench._common import fake_model_process  # noqa: E402
from tests.e2e.harness import Daemon  # noqa: E402

PLATFORMS = ("telegram", "slack", "discord")
#: Replies per second one chat may receive (the bench's Telegram chats are supergroups: 20 a
#: minute; Slack ~1/s, Discord 5 per 5 s) and the bot-wide ceiling (Telegram 30/s; the others
#: have none that 20 chats reach).
PER_CHAT_RATE = {"telegram": 20 / 60, "slack": 1.0, "discord": 1.0}
#: a message edit, as each fake counts it (a best-effort call, paced like a message)
EDIT_METHODS = frozenset({"editMessageText", "chat.update", "edit_message"})
PER_BOT_RATE = {"telegram": 30.0, "slack": float("inf"), "discord": float("inf")}


def pacing_floor_s(platform: str, replies: int, chats: int) -> float:
    """The least time `replies` spread evenly over `chats` can take under the limits (the
    "floor" column: all messages answered one by one; "sent floor": the replies actually sent,
    fewer when bursts are folded)."""
    per_chat = replies / max(chats, 1) / PER_CHAT_RATE[platform]
    return max(per_chat, replies / PER_BOT_RATE[platform])


@dataclass
class RunResult:
    platform: str
    run: int
    chats: int
    injected: int
    received: int
    delivered: int  # messages an accepted reply answers, counted at the platform fake
    missing: list[int]
    answered: int  # messages the daemon's journal calls answered
    statuses: dict[str, int]
    replies: int
    replied_to: int | None
    dlq: dict[str, int]
    reply_429s: int
    other_429s: int
    best_effort: int
    edits: int  # message edits the platform accepted (streamed replies; also best effort)
    edit_429s: int
    elapsed_s: float
    floor_s: float
    sent_floor_s: float
    cpu_ms_per_msg: float
    peak_rss_mib: float
    peak_fds: int
    peak_connections: int
    outcome: str

    @property
    def complete(self) -> bool:
        return self.delivered == self.injected and self.outcome == "done"


def run_once(platform: str, run: int, model_url: str, args: argparse.Namespace) -> RunResult:
    """One burst against a fresh daemon and a fresh fake; always cleans up."""
    host = FakeHostProcess(platform, args.chats, limits=not args.no_limits)
    tmp = tempfile.TemporaryDirectory(prefix=f"burst-{platform}-")
    workspace = Path(tmp.name) / "ws"
    workspace.mkdir()
    daemon = Daemon(workspace, daemon_env(workspace, model_url, host.env,
                                          LOG_LEVEL=args.log_level, **extra_env(args)),
                    Path(tmp.name) / "daemon.log")
    try:
        daemon.start()
        if not wait_until(lambda: host.call("ready"), 30):
            raise RuntimeError(f"the daemon never connected to the {platform} fake")
        assert daemon.proc is not None
        probe = DaemonProbe(daemon.proc.pid)
        journal = JournalCount(workspace / "runtime" / "bus" / "inbound.jsonl")
        probe.mark()
        started = time.monotonic()
        host.call("burst", messages=args.messages)
        outcome, elapsed = _wait_drained(daemon, host, journal, probe, args, started)
        cpu_s = probe.cpu_s()
        stats = host.call("stats")
        seen = host.call("delivered", messages=args.messages)
        journal.refresh()
    except Exception as exc:
        print(f"  {platform} run {run}: failed to run: {exc}", file=sys.stderr)
        if args.keep_logs:
            print(daemon.log()[-4000:], file=sys.stderr)
        raise
    finally:
        daemon.close()
        host.close()
    sends = set(stats["send_methods"])
    result = RunResult(
        platform, run, args.chats, args.messages, len(journal.received), seen["delivered"],
        seen["missing"], journal.answered,
        journal.statuses(), stats["replies"], stats["replied_to"], dead_letters(workspace),
        sum(n for m, n in stats["rate_limited"].items() if m in sends),
        sum(n for m, n in stats["rate_limited"].items() if m not in sends),
        sum(stats["best_effort"].values()),
        sum(n for m, n in stats["best_effort"].items() if m in EDIT_METHODS)
        - sum(n for m, n in stats["rate_limited"].items() if m in EDIT_METHODS),
        sum(n for m, n in stats["rate_limited"].items() if m in EDIT_METHODS), elapsed,
        pacing_floor_s(platform, args.messages, args.chats),
        pacing_floor_s(platform, stats["replies"], args.chats),
        1000 * cpu_s / max(args.messages, 1), probe.peak.rss_mib, probe.peak.fds,
        probe.peak.connections, outcome)
    if args.keep_logs:
        print(f"  logs kept in {tmp.name}")
    else:
        tmp.cleanup()
    return result


def extra_env(args: argparse.Namespace) -> dict[str, str]:
    """`--env KEY=VALUE` settings for the daemon (e.g. CHANNEL_FOLD_MAX=1: no folding)."""
    return dict(item.split("=", 1) for item in args.env)


def _wait_drained(daemon: Daemon, host: FakeHostProcess, journal: JournalCount,
                  probe: DaemonProbe, args: argparse.Namespace, started: float
                  ) -> tuple[str, float]:
    """Until the platform has an answer to every message and nothing waits to be sent; or
    stalled / timed out."""
    timeout = args.timeout or 3 * pacing_floor_s(host.platform, args.messages, args.chats) + 60
    last_progress, last_seen = started, (-1, -1)
    finished_at = started
    while True:
        time.sleep(args.poll)
        journal.refresh()
        probe.sample()
        # progress from the journal and the fake: asking the daemon's /api/state every poll
        # would bill the bench's own questions to the daemon's CPU
        progress = (len(journal.done), host.call("stats")["replies"])
        now = time.monotonic()
        if progress != last_seen:
            last_seen, last_progress, finished_at = progress, now, now
        if (len(journal.done) >= args.messages
                and host.call("delivered", messages=args.messages)["delivered"] >= args.messages):
            queues = daemon.state()["queues"]
            if queues["outbox_pending"] == 0 and queues["outbound_queued"] == 0:
                return "done", finished_at - started
        if not daemon.alive():
            return "daemon exited", now - started
        if now - last_progress > args.stall:
            return f"stalled {args.stall:.0f}s", last_progress - started
        if now - started > timeout:
            return "timeout", now - started


COLUMNS = ("platform", "run", "delivered", "journal", "replies", "dlq out/in", "429 reply/other",
           "best-effort", "edits", "edits/chat-min", "429 edits", "time s", "floor s",
           "sent floor s", "cpu ms/msg", "rss MiB", "fds", "conns", "outcome")


def row(r: RunResult) -> tuple[str, ...]:
    return (r.platform, str(r.run), f"{r.delivered}/{r.injected}",
            f"{r.answered}/{r.injected}", str(r.replies),
            f"{r.dlq['outbound']}/{r.dlq['inbound']}", f"{r.reply_429s}/{r.other_429s}",
            str(r.best_effort), str(r.edits),
            f"{r.edits / r.chats / max(r.elapsed_s / 60, 1e-9):.1f}",
            str(r.edit_429s), f"{r.elapsed_s:.1f}", f"{r.floor_s:.0f}", f"{r.sent_floor_s:.1f}",
            f"{r.cpu_ms_per_msg:.2f}", f"{r.peak_rss_mib:.0f}", str(r.peak_fds),
            str(r.peak_connections), r.outcome)


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def summarize(results: list[RunResult]) -> None:
    print("\nsummary")
    for platform in dict.fromkeys(r.platform for r in results):
        runs = [r for r in results if r.platform == platform]
        complete = [r for r in runs if r.complete]
        times = [r.elapsed_s for r in complete]
        print(f"  {platform}: {len(complete)}/{len(runs)} runs answered all {runs[0].injected} "
              f"at the platform; delivered min {min(r.delivered for r in runs)} "
              f"(missing e.g. {next((r.missing for r in runs if r.missing), [])}); "
              f"journal answered min {min(r.answered for r in runs)}; "
              f"dead letters max {max(sum(r.dlq.values()) for r in runs)}; "
              f"429s on replies max {max(r.reply_429s for r in runs)}; "
              f"time median {statistics.median(times) if times else float('nan'):.1f} s "
              f"(floor {runs[0].floor_s:.0f} s, for the replies sent "
              f"{statistics.median(r.sent_floor_s for r in runs):.1f} s); "
              f"cpu median {statistics.median(r.cpu_ms_per_msg for r in runs):.2f} ms/msg; "
              f"peak RSS max {max(r.peak_rss_mib for r in runs):.0f} MiB; "
              f"replies median {statistics.median(r.replies for r in runs):.0f}; "
              f"statuses {runs[-1].statuses}")


def slow_model_options(spec: str) -> list[str]:
    """`--slow-model 30,0.1` as the fake model's options."""
    if not spec:
        return []
    words, seconds = spec.split(",", 1)
    return ["--echo-words", str(int(words)), "--chunk-delay", str(float(seconds))]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="all", choices=(*PLATFORMS, "all"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds per run (default: 3x the pacing floor + 60)")
    parser.add_argument("--stall", type=float, default=60.0,
                        help="end a run when nothing is answered or sent for this long")
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--no-limits", action="store_true",
                        help="fakes accept every send (measures the daemon without pacing)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a daemon setting for every run (repeatable)")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--slow-model", default="", metavar="WORDS,SECONDS",
                        help="the fake model answers with this many more words, streamed "
                             "this many seconds apart (a slow writer: replies stream)")
    parser.add_argument("--soak", action="store_true",
                        help="mixed platforms at --rate msg/s with /stops and faults")
    parser.add_argument("--duration", type=float, default=1800.0)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--report-every", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=13)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    platforms = PLATFORMS if args.platform == "all" else (args.platform,)
    if args.soak:  # bench/soak.py is the soak now; this spelling stays for old command lines
        from bench.soak import main as soak_main
        return soak_main(["--duration", str(args.duration), "--rate", str(args.rate),
                          "--platform", args.platform, "--seed", str(args.seed),
                          "--report-every", str(args.report_every), "--log-level",
                          args.log_level, *(f"--env={item}" for item in args.env),
                          *(["--no-limits"] if args.no_limits else [])])
    with fake_model_process(*slow_model_options(args.slow_model)) as model_url:
        results: list[RunResult] = []
        for platform in platforms:
            for run in range(1, args.runs + 1):
                result = run_once(platform, run, model_url, args)
                results.append(result)
                print_table([row(result)])
                sys.stdout.flush()
        print()
        print_table([row(r) for r in results])
        summarize(results)
    return 0 if all(r.complete for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
