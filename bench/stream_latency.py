"""Time to the first visible text vs time to the whole answer, with a model that writes
slowly, per platform, through the real SDKs against the fakes (streamed replies, issue 20).

Per platform: a fresh workspace, the platform's fake in its own process (its limits on), a
fake model that answers each mention with its echo and `--words` more words streamed
`--delay` seconds apart, and `soulflow run` as a subprocess. Each of `--runs` mentions goes to
a chat of its own; the bench polls the platform for the bot's messages there and reports when
the first text appeared, when the message held the whole answer, how many messages the reply
took (1 expected) and how many edits the platform accepted per reply. With
`--env STREAM_REPLIES=off` the first text is the whole answer.

    python bench/stream_latency.py [--platform telegram|slack|discord|all] [--runs 5]
                                   [--words 60] [--delay 0.1] [--env KEY=VALUE]
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
POLL_S = 0.01
EDIT_METHODS = ("editMessageText", "chat.update", "edit_message")


def time_one(host: FakeHostProcess, index: int, last_word: str,
             timeout: float) -> tuple[float, float, int]:
    """(first text s, whole answer s, messages) for mention `index` in chat `index`."""
    started = time.monotonic()
    host.call("post", index=index, text=f"stream {index}")
    first: float | None = None
    deadline = started + timeout
    while time.monotonic() < deadline:
        texts = [t for t in host.call("replies", index=index) if f"stream {index}" in t]
        now = time.monotonic() - started
        if texts and first is None:
            first = now
        if texts and texts[-1].rstrip().endswith(last_word):
            return first or now, now, len(texts)
        time.sleep(POLL_S)
    raise RuntimeError(f"no whole answer to mention {index} within {timeout:.0f}s")


def run_platform(platform: str, model_url: str, args: argparse.Namespace) -> None:
    host = FakeHostProcess(platform, args.runs, limits=True)
    tmp = tempfile.TemporaryDirectory(prefix=f"stream-{platform}-")
    workspace = Path(tmp.name) / "ws"
    workspace.mkdir()
    extra = dict(item.split("=", 1) for item in args.env)
    daemon = Daemon(workspace, daemon_env(workspace, model_url, host.env, **extra),
                    Path(tmp.name) / "daemon.log")
    try:
        daemon.start()
        if not wait_until(lambda: host.call("ready"), 30, POLL_S):
            raise RuntimeError(f"the daemon never connected to the {platform} fake")
        last_word = f"and{args.words - 1}"
        timings = [time_one(host, i, last_word, args.timeout) for i in range(args.runs)]
        calls = host.call("calls")
    finally:
        daemon.close()
        host.close()
        tmp.cleanup()
    first = [t[0] for t in timings]
    whole = [t[1] for t in timings]
    edits = sum(calls.get(m, 0) for m in EDIT_METHODS) / len(timings)
    print(f"{platform:<10} {statistics.median(first):>10.2f} s {statistics.median(whole):>10.2f} s "
          f"{max(t[2] for t in timings):>9} {edits:>13.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=(*PLATFORMS, "all"), default="all")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    platforms = PLATFORMS if args.platform == "all" else (args.platform,)
    print(f"{'platform':<10} {'first text':>12} {'whole':>12} {'messages':>9} "
          f"{'edits/reply':>13}   (medians over {args.runs} replies; "
          f"{args.words} words {args.delay} s apart)")
    with fake_model_process("--echo-words", str(args.words),
                            "--chunk-delay", str(args.delay)) as model_url:
        for platform in platforms:
            run_platform(platform, model_url, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
