"""First-reply latency after a start, per platform, through the real SDKs against the fakes.

Per platform and run: a fresh workspace, the platform's fake in its own process, the instant
fake model in another, and `soulflow run` as a subprocess. The bench waits for the earliest
moment a user's message can reach the daemon (Telegram: its long poll has begun; Slack: the
Socket Mode connection is open; Discord: the gateway session is identified), posts one
mention at once, and times it from the post to the platform receiving the reply ("first").
Then it posts a second one in another chat (not paced behind the first) and times that too
("steady"): the difference is what the start itself still costs the first message. The last
column counts the calls made only to check whether a reply was already sent, per reply
(expected 0: Slack looks only for replies that may have been sent before a crash).

    python bench/first_reply.py [--platform telegram|slack|discord|all] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._burst_probe import FakeHostProcess, daemon_env, wait_until  # noqa: E402
from bench._common import fake_model_process  # noqa: E402
from tests.e2e.harness import Daemon  # noqa: E402

PLATFORMS = ("telegram", "slack", "discord")
POLL_S = 0.002  # how often the bench asks the fake whether the reply is there


def _answered(host: FakeHostProcess, prefix: str, index: int) -> bool:
    return bool(host.call("delivered", prefix=prefix, start=index, messages=1)["delivered"])


def _time_reply(host: FakeHostProcess, prefix: str, index: int, timeout: float) -> float:
    """Post mention `index` and return the seconds until the platform has its reply."""
    started = time.monotonic()
    host.call("post", index=index, text=f"{prefix} {index}")
    if not wait_until(lambda: _answered(host, prefix, index), timeout, POLL_S):
        raise RuntimeError(f"no reply to {prefix} {index} within {timeout:.0f}s")
    return time.monotonic() - started


#: calls that exist only to find out whether a reply was already sent (Slack's look-up;
#: Discord's nonce rides on the create itself, Telegram has none)
LOOKUP_CALLS = ("conversations.history", "conversations.replies")


def run_once(platform: str, model_url: str, timeout: float) -> tuple[float, float, int]:
    """(first, steady) reply latency in seconds on a fresh daemon and fake, and the look-up
    calls the platform received meanwhile (Socket Mode reads no history otherwise)."""
    host = FakeHostProcess(platform, 2, limits=False)  # steady goes to the other chat
    tmp = tempfile.TemporaryDirectory(prefix=f"first-reply-{platform}-")
    workspace = Path(tmp.name) / "ws"
    workspace.mkdir()
    daemon = Daemon(workspace, daemon_env(workspace, model_url, host.env),
                    Path(tmp.name) / "daemon.log")
    try:
        daemon.start()
        if not wait_until(lambda: host.call("ready"), 30, POLL_S):
            raise RuntimeError(f"the daemon never connected to the {platform} fake")
        first = _time_reply(host, "first", 0, timeout)
        steady = _time_reply(host, "steady", 1, timeout)  # not behind the first's pacing
        calls = host.call("calls")
    finally:
        daemon.close()
        host.close()
        tmp.cleanup()
    return first, steady, sum(calls.get(method, 0) for method in LOOKUP_CALLS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=(*PLATFORMS, "all"), default="all")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    platforms = PLATFORMS if args.platform == "all" else (args.platform,)
    print(f"{'platform':<10} {'first median':>13} {'first max':>10} {'steady median':>14} "
          f"{'look-ups/reply':>15}")
    with fake_model_process() as model_url:
        for platform in platforms:
            runs = [run_once(platform, model_url, args.timeout) for _ in range(args.runs)]
            first, steady = [r[0] for r in runs], [r[1] for r in runs]
            lookups = sum(r[2] for r in runs) / (2 * len(runs))
            print(f"{platform:<10} {statistics.median(first) * 1000:>10.0f} ms "
                  f"{max(first) * 1000:>7.0f} ms {statistics.median(steady) * 1000:>11.0f} ms "
                  f"{lookups:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
