"""`read_file` racing a swapped parent directory, through the real daemon (issue 17,
finding 8): on Telegram, against its fake and the fake model.

Before the zones, `read_file` judged the path and then opened it again by name: swapping a
parent directory for a link to `runtime/` between the two returned `runtime/` content in
6-8 of 90 parallel reads. Here the operator has `shelf/inbound.jsonl` (a harmless regular
file); while a thread of the test keeps swapping `shelf/` for a link to `runtime/bus/` and
back, three chats' runs each make 60 `read_file` calls on that path at once. Every read
returns the operator's file or a refusal, never the daemon's inbound journal (which holds
Bob's DM message). The unit test (tests/security/test_file_race.py) races the tool itself;
this one races the running daemon, its worker threads and its event loop.
"""

from __future__ import annotations

import ctypes
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon
from tests.e2e.platform_helpers import make_driver
from tests.e2e.test_platforms import Live, daemon_env
from tests.e2e.test_zone_memory import People, allowed_env, people
from tests.e2e.tool_runs import start_tools
from tests.fakes.openai_api import FakeOpenAIThread

READS_PER_CHAT = 60
SHELF_TEXT = "the operator's shelf: nothing of the daemon's here\n"


AT_FDCWD, RENAME_EXCHANGE = -100, 2
_LIBC = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> bool:
    """Swap two names in one step (renameat2 RENAME_EXCHANGE); False where unsupported."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (38, 22):  # ENOSYS, EINVAL: no such flag on this kernel
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(a))


class Swapper(threading.Thread):
    """Swaps `folder` for a link to `target` and back, as fast as it can, until stopped:
    in one step where the kernel can (the path is then always one or the other), else by
    rename, symlink, unlink, rename."""

    def __init__(self, folder: Path, target: str) -> None:
        super().__init__(name="swapper", daemon=True)
        self.folder, self.target = folder, target
        self.link = folder.with_name(f"{folder.name}.link")
        self.parked = folder.with_name(f"{folder.name}.parked")
        self.swaps = 0
        self.atomic = False
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            os.symlink(self.target, self.link)
            self.atomic = exchange(self.folder, self.link) and exchange(self.folder, self.link)
            while not self._halt.is_set():
                if self.atomic:
                    exchange(self.folder, self.link)  # folder is now the link
                    exchange(self.folder, self.link)  # and the real folder again
                else:
                    os.rename(self.folder, self.parked)
                    os.symlink(self.target, self.folder)
                    os.unlink(self.folder)
                    os.rename(self.parked, self.folder)
                self.swaps += 1
        except BaseException as exc:  # reported by stop(), in the test's thread
            self.error = exc

    def stop(self) -> int:
        """Stop with the real folder back in place; how many swaps were made."""
        self._halt.set()
        self.join(10)
        if self.error is not None:
            raise self.error
        assert self.folder.is_dir() and not self.folder.is_symlink()
        return self.swaps


@pytest.fixture
def live(tmp_path: Path, llm: FakeOpenAIThread) -> Iterator[tuple[Live, People]]:
    llm.reset()
    with make_driver("telegram", paced=False) as driver:
        who = people(driver)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = {**daemon_env(workspace, llm, driver), **allowed_env(driver, who)}
        daemon = Daemon(workspace, env, tmp_path / "daemon.log")
        try:
            daemon.start()
            driver.wait_ready(daemon)
            yield Live(driver, daemon, llm), who
        finally:
            daemon.close()


def test_parallel_reads_never_return_runtime_content_while_a_parent_is_swapped(
        live: tuple[Live, People]) -> None:
    running, who = live
    ws = running.workspace
    bob_note = f"bobprivate{uuid.uuid4().hex[:10]}"
    running.driver.post(f"my private note {bob_note}", user=who.bob, chat=who.bob_dm)
    running.wait_post(f"echo: my private note {bob_note}", who.bob_dm)
    journal = ws / "runtime" / "bus" / "inbound.jsonl"
    running.wait(lambda: bob_note in journal.read_text(errors="replace"),
                 "Bob's message in the inbound journal")
    (ws / "shelf").mkdir()
    (ws / "shelf" / "inbound.jsonl").write_text(SHELF_TEXT)

    calls = [("read_file", {"path": "shelf/inbound.jsonl"})] * READS_PER_CHAT
    swapper = Swapper(ws / "shelf", "runtime/bus")
    swapper.start()
    try:
        started = [start_tools(running, chat, calls, user=user)
                   for chat, user in ((who.alice_dm, who.alice), (who.group, who.alice),
                                      (who.bob_dm, who.bob))]
        runs = [run.finish(timeout=120) for run in started]
    finally:
        swaps = swapper.stop()

    outputs = [output for run in runs for output in run.outputs]
    seen = Counter("the operator's file" if output == SHELF_TEXT
                   else "refused" if output.startswith("Error") else "other"
                   for output in outputs)
    leaked = [output[:200] for output in outputs
              if output != SHELF_TEXT and not output.startswith("Error")]
    assert leaked == [], f"{len(leaked)} of {len(outputs)} reads returned other content: {seen}"
    assert bob_note not in "".join(outputs)
    # the race was run: the folder was swapped, and reads found it both ways (by rename
    # alone the real folder is there for a moment per swap: reads rarely find it)
    assert swaps > 0 and seen["refused"], (swaps, seen)
    assert seen["the operator's file"] or not swapper.atomic, (swaps, seen)
