"""Reading the last 50 messages of a session must not depend on the session's size.

    python bench/session_tail.py [--lines 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import describe_ms  # noqa: E402
from soulflow.backends.file.sessions import FileSessionStore  # noqa: E402
from soulflow.storage.jsonl import JsonlFile  # noqa: E402


def build(directory: Path, key: str, lines: int) -> Path:
    store = FileSessionStore(directory)
    store.append(key, {"role": "user", "content": "first"})
    store.close()
    journal = JsonlFile(directory / f"{key}.jsonl", fsync="never")
    batch = []
    for i in range(lines - 1):
        role = "user" if i % 2 else "assistant"
        batch.append({"role": role, "content": f"message number {i} " + "lorem ipsum " * 8,
                      "at": 1_700_000_000 + i})
        if len(batch) == 10_000:
            journal.append_many(batch)
            batch.clear()
    journal.append_many(batch)
    journal.close()
    return directory / f"{key}.jsonl"


def measure(directory: Path, key: str, repeats: int = 200) -> list[float]:
    store = FileSessionStore(directory)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        messages = store.last(key, 50)
        timings.append(time.perf_counter() - start)
        assert len(messages) == 50
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for lines in (1_000, args.lines):
            directory = Path(tmp) / str(lines)
            path = build(directory, "bench", lines)
            size_mb = path.stat().st_size / 1e6
            print(f"last-50 read, {lines:>9,} lines ({size_mb:,.0f} MB): "
                  f"{describe_ms(measure(directory, 'bench'))}")


if __name__ == "__main__":
    main()
