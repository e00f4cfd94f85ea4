"""Finding 8: `read_file` raced against a parent directory swapped for a link to runtime/.

A run's own folder holds ``d1/data.txt`` and ``d2/data.txt``; one thread per folder keeps
swapping it for a link to ``runtime/`` (which holds a ``data.txt`` of its own) and back, while
rounds of 100 parallel ``read_file`` calls ask for the harmless files. A check that resolves
the path and then opens it again by name can be raced: the parent was a directory at the check
and is a link at the open, and runtime/ comes back. The file tools open beneath the workspace
without following any link and check what they opened, so no read may ever return runtime/.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext, ToolResult

RUNTIME_TEXT = "runtime/ content: every chat's journal"
HARMLESS = "harmless"
PARALLEL_READS = 100
ROUNDS = 8


class Swapper(threading.Thread):
    """Swaps ``folder`` (a directory) for ``folder.link`` (a link to runtime/) and back,
    until told to stop; counts the completed swaps."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.stopping = threading.Event()
        self.swaps = 0

    def run(self) -> None:
        real, link = self.folder.with_name(self.folder.name + ".real"), \
            self.folder.with_name(self.folder.name + ".link")
        while not self.stopping.is_set():
            os.rename(self.folder, real)
            os.rename(link, self.folder)  # the name is a link to runtime/ now
            os.rename(self.folder, link)
            os.rename(real, self.folder)  # and the directory again
            self.swaps += 1


async def test_a_parent_swapped_for_a_link_never_reads_runtime(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    own = workspace / "chats" / "local-c1"  # the folder of the chat below (local:c1)
    (workspace / "runtime").mkdir(parents=True)
    (workspace / "runtime" / "data.txt").write_text(RUNTIME_TEXT)
    swappers = []
    for name in ("d1", "d2"):
        (own / name).mkdir(parents=True)
        (own / name / "data.txt").write_text(HARMLESS)
        (own / f"{name}.link").symlink_to("../../runtime")
        swappers.append(Swapper(own / name))
    registry = build_default_registry()
    ctx = ToolContext(workspace, ChatRef("local", "c1", sender_id="u1"))
    results: list[ToolResult] = []
    for swapper in swappers:
        swapper.start()
    try:
        for _ in range(ROUNDS):
            results += await asyncio.gather(*(
                registry.execute("read_file", {"path": f"chats/local-c1/d{1 + i % 2}/data.txt"},
                                 ctx) for i in range(PARALLEL_READS)))
    finally:
        for swapper in swappers:
            swapper.stopping.set()
        for swapper in swappers:
            swapper.join()
    leaked = [r for r in results if RUNTIME_TEXT in r.output]
    assert not leaked, f"{len(leaked)} of {len(results)} reads returned runtime/ content"
    assert all(s.swaps > 0 for s in swappers)
    assert any(r.output == HARMLESS for r in results)  # the reads did race the swaps
    refused = [r.output for r in results if r.status == "error"]
    assert all("symbolic link" in o or "not found" in o for o in refused), set(refused)
