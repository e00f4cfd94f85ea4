"""What finding the `exec` masks costs on a workspace: a cold walk and a cached check.

    python bench/mask_scan.py [--workspace DIR] [--repeats 20]

The default workspace is this repository (with its ``.venv``, ``.git`` and ``node_modules``
when they are there: the quick-start layout). Nothing is written. "cold" builds a new
scanner for each call (the first call after a start); "cached" reuses one, which lists
again only the directories that changed (one ``lstat`` per directory otherwise).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, describe_ms  # noqa: E402
from soulflow.agent.tools import sandbox_masks  # noqa: E402


def timed(call: object, repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        timings.append(time.perf_counter() - start)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", type=Path, default=ROOT)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    workspace = args.workspace.resolve()
    dirs = entries = 0
    for _current, subdirs, files in os.walk(workspace):
        dirs += 1
        entries += len(subdirs) + len(files)
    print(f"workspace {workspace}: {entries:,} entries in {dirs:,} directories")
    scanner_type = getattr(sandbox_masks, "MaskScanner", None)
    if scanner_type is None:  # an older tree: one uncached, capped walk per call
        every = timed(lambda: sandbox_masks.masked_paths(workspace), args.repeats)
        print(f"masked_paths: {describe_ms(every)}")
        return
    cold = timed(lambda: sandbox_masks.masked_paths(workspace, scanner=scanner_type()),
                 args.repeats)
    print(f"cold:   {describe_ms(cold)}")
    scanner = scanner_type()
    sandbox_masks.masked_paths(workspace, scanner=scanner)
    time.sleep(sandbox_masks.RACY_NS / 1e9 + 0.1)  # past the racy window of that listing
    sandbox_masks.masked_paths(workspace, scanner=scanner)
    cached = timed(lambda: sandbox_masks.masked_paths(workspace, scanner=scanner),
                   args.repeats)
    print(f"cached: {describe_ms(cached)}")


if __name__ == "__main__":
    main()
