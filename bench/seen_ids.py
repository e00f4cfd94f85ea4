"""RAM per million seen inbound ids on the file backend, while running and after a restart.

The inbound journal must remember every message id it took in for the redelivery window, so
that a platform's redelivery is never answered twice. This bench takes in `--ids` messages
(accept, then complete, as the daemon does; the journal compacted whenever it asks to be, as
the daemon's sync loop does), then reopens the journal in a fresh process as a restart would,
and prints what each costs in RSS, scaled to a million ids, plus the time of a lookup.

    python bench/seen_ids.py [--ids 1000000]

It imports whatever tree is on `sys.path` first, so the same script measures an older tree:
`PYTHONPATH=/path/to/old/tree python bench/seen_ids.py`. The journal's count cap (the old
in-memory set's `seen_max`) is raised above `--ids` where the tree has one, so every id is kept.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: an older tree given there wins

from soulflow.backends.file.inbound import InboundJournal  # noqa: E402
from soulflow.contracts import InboundMessage  # noqa: E402

BASE_AT = 1_900_000_000.0  # a fixed clock: nothing expires during the bench


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def open_journal(path: Path, ids: int) -> InboundJournal:
    """The journal with the count cap (if this tree has one) above `ids`."""
    kwargs: dict[str, Any] = {"fsync": "never", "clock": lambda: BASE_AT}
    if "seen_max" in inspect.signature(InboundJournal).parameters:
        kwargs["seen_max"] = 2 * ids
    return InboundJournal(path, **kwargs)


def message(i: int) -> InboundMessage:
    # a Telegram-shaped key: telegram:<supergroup id>:<message id>
    return InboundMessage(provider="telegram", chat_id=f"-100300000{i % 20:04d}",
                          message_id=str(1_000_000 + i), sender_id="111111",
                          text=f"message {i}", received_at=BASE_AT)


def fill(path: Path, ids: int) -> dict[str, float]:
    before = rss_mib()
    journal = open_journal(path, ids)
    started = time.perf_counter()
    for i in range(ids):
        msg = message(i)
        journal.accept(msg)
        journal.complete(msg.key, "answered")
        if i % 10_000 == 0 and journal.needs_compaction:
            journal.compact()
    journal.compact()
    if hasattr(journal, "sync"):
        journal.sync()
    elapsed = time.perf_counter() - started
    held = rss_mib() - before
    lookups = _lookup_us(journal, ids)
    journal.close()
    return {"fill_s": elapsed, "held_mib": held, **lookups}


def _lookup_us(journal: InboundJournal, ids: int, repeats: int = 20_000) -> dict[str, float]:
    """Mean µs of `is_seen` for old ids (past any small cache), and for unknown ones."""
    keys = [message(i * 7919 % ids).key for i in range(repeats)]
    started = time.perf_counter()
    assert all(journal.is_seen(k) for k in keys)
    hit = (time.perf_counter() - started) / repeats * 1e6
    started = time.perf_counter()
    assert not any(journal.is_seen(f"telegram:-1:{i}") for i in range(repeats))
    miss = (time.perf_counter() - started) / repeats * 1e6
    return {"lookup_hit_us": hit, "lookup_miss_us": miss}


def reopen(path: Path, ids: int) -> dict[str, float]:
    """In this (fresh) process: open the journal as a restart does."""
    before = rss_mib()
    started = time.perf_counter()
    journal = open_journal(path, ids)
    boot = time.perf_counter() - started
    held = rss_mib() - before
    assert journal.is_seen(message(0).key) and journal.is_seen(message(ids - 1).key)
    journal.close()
    return {"boot_s": boot, "held_mib": held}


def disk_mib(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--reopen", metavar="PATH", help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.reopen:
        print(json.dumps(reopen(Path(args.reopen), args.ids)))
        return 0
    with tempfile.TemporaryDirectory(prefix="seen-ids-") as tmp:
        path = Path(tmp) / "bus" / "inbound.jsonl"
        filled = fill(path, args.ids)
        child = subprocess.run([sys.executable, __file__, "--ids", str(args.ids),
                                "--reopen", str(path)], check=True, capture_output=True,
                               text=True, env=os.environ)
        booted = json.loads(child.stdout.strip().splitlines()[-1])
        scale = 1_000_000 / args.ids
        print(f"seen ids: {args.ids:,} taken in ({filled['fill_s']:.1f} s), "
              f"{disk_mib(Path(tmp)):.1f} MiB on disk")
        print(f"  running: RSS +{filled['held_mib']:.1f} MiB "
              f"({filled['held_mib'] * scale:.1f} MiB per million ids)")
        print(f"  after a restart: RSS +{booted['held_mib']:.1f} MiB "
              f"({booted['held_mib'] * scale:.1f} MiB per million ids), "
              f"boot {booted['boot_s']:.2f} s")
        print(f"  is_seen: {filled['lookup_hit_us']:.1f} µs for an old id, "
              f"{filled['lookup_miss_us']:.1f} µs for an unknown one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
