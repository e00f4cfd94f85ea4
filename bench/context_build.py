"""The cost of one turn's system prompt, and of the per-zone prompt cache.

    python bench/context_build.py [--code DIR] [--repeats 2000] [--zones 1000]

Builds the prompt the way a turn does, on a workspace like a busy deployment's (two
templates, three agent roles, ten skills, a 6 KB MEMORY.md, a 16 KB daily note, and per chat
a 2 KB MEMORY.md and a 4 KB note):

* ``reread``: the prompt re-read from disk (the first turn after the one-second recheck):
  templates, roles, skills index, global memory and, with trust zones, the chat zone's
  memory, every file opened beneath the workspace without following links;
* ``cached``: a turn within the second (what most turns of a busy chat cost);
* ``chat part``: (trust zones only) one zone's part re-read while the global part is cached
  (a turn of another chat in the same second).

``--code DIR`` imports SoulFlow from DIR (a checkout of another commit, to compare). Then,
with trust zones, the memory the zone cache holds with ``--zones`` chats: all of them
turning within one second (the cap bounds it), and a second later (only fresh zones stay).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import inspect
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def workspace(root: Path, zones: list[str]) -> None:
    def write(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    today = dt.date.today().isoformat()
    write("templates/AGENTS.md", "# Agent\n\n" + "Be helpful and brief. " * 60)
    write("templates/USER.md", "# User\n\n" + "The team builds things. " * 30)
    for name in ("reviewer", "planner", "writer"):
        write(f"agents/{name}.md", f"---\nname: {name}\ndescription: the {name}\n---\n"
              + "Do the job well. " * 40)
    for i in range(10):
        write(f"skills/skill{i}/SKILL.md", f"---\nname: skill{i}\ndescription: does thing "
              f"{i}\n---\n" + "step. " * 200)
    write("memory/MEMORY.md", "# Long-term memory\n\n" + "- an operator fact\n" * 330)
    write(f"memory/{today}.md", f"# {today}\n\n" + "An operator note paragraph.\n\n" * 560)
    for zone in zones:
        write(f"chats/{zone}/memory/MEMORY.md", "# Memory\n\n" + "- a fact of this chat\n" * 95)
        write(f"chats/{zone}/memory/{today}.md", f"# {today}\n\n" + "A summary.\n\n" * 330)


def builder(root: Path, clock: Clock, zoned: bool, **options: Any) -> Any:
    from soulflow.agent.context import ContextBuilder
    from soulflow.agent.memory import MemoryStore
    from soulflow.backends.file.decisions import FileDecisionStore
    from soulflow.backends.file.sessions import FileSessionStore
    from soulflow.decision.service import DecisionService

    if zoned:
        from soulflow.storage.beneath import Beneath

        memory = MemoryStore(Beneath(root))
    else:
        memory = MemoryStore(root / "memory")
    return ContextBuilder(root, memory, DecisionService(FileDecisionStore(root / "decisions.json")),
                          FileSessionStore(root / "sessions"), clock=clock, **options)


def timed(call: Any, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def describe(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered):8.1f} µs  p90 "
            f"{ordered[int(len(ordered) * 0.9)]:8.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--zones", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from soulflow.agent.context import ContextBuilder

    zoned = len(inspect.signature(ContextBuilder.system_prompt).parameters) > 1
    print(f"code: {args.code.resolve()} ({'trust zones' if zoned else 'before trust zones'})")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = [f"telegram-{i}" for i in range(args.zones)]
        workspace(root, names[:2])
        clock = Clock()
        context = builder(root, clock, zoned)

        def prompt(zone: str = names[0]) -> str:
            if not zoned:
                return str(context.system_prompt())
            from soulflow.security.zones import ChatZone

            return str(context.system_prompt(ChatZone(zone)))

        size = len(prompt().encode())

        def reread() -> None:
            clock.now += 1.5
            prompt()
        print(f"prompt size       {size:8d} bytes")
        print(f"reread            {describe(timed(reread, args.repeats))}")
        print(f"cached            {describe(timed(prompt, args.repeats))}")
        if not zoned:
            return
        toggle = [0]

        def chat_part() -> None:  # another chat's turn within the same second
            toggle[0] ^= 1
            context._chat_parts.clear()  # this zone's part is not cached
            prompt(names[toggle[0]])
        print(f"chat part reread  {describe(timed(chat_part, args.repeats))}")
        memory_use(root, names, args.zones)


def memory_use(root: Path, names: list[str], zones: int) -> None:
    """Bytes the zone cache holds with `zones` chats, each with its own memory files."""
    from soulflow.agent.context import CHAT_PROMPT_CACHE
    from soulflow.security.zones import ChatZone

    workspace(root, names)
    warm = builder(root, Clock(), True)  # one-time allocations (caches, imports) go first
    for name in names:
        warm.system_prompt(ChatZone(name))
    del warm
    for cap in (CHAT_PROMPT_CACHE, zones):
        clock = Clock()
        context = builder(root, clock, True, chat_cache_size=cap)
        context.system_prompt()  # the global part, outside the measurement
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.take_snapshot()
        for name in names:
            context.system_prompt(ChatZone(name))
        gc.collect()
        in_second = sum(stat.size_diff for stat in
                        tracemalloc.take_snapshot().compare_to(base, "filename"))
        held_zones = context.cached_zones()
        clock.now += 1.5
        context.system_prompt(ChatZone(names[0]))
        gc.collect()
        later = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(
            base, "filename"))
        tracemalloc.stop()
        print(f"zone cache, cap {cap:5d}: {zones} chats in one second -> {held_zones:5d} "
              f"zones held, {in_second / 1024:8.1f} KiB; a second later "
              f"{later / 1024:8.1f} KiB ({context.cached_zones()} zone held)")


if __name__ == "__main__":
    main()
