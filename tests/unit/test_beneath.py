"""`Beneath`: workspace files opened beneath a root without following any link.

Each test plants what a prompt-injected run could plant (a link in a parent, a link as the
file, a FIFO, a swap between check and open) and checks the daemon-side open refuses it, on
both resolvers: the kernel's ``openat2`` and the component-wise ``O_NOFOLLOW`` fallback.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from soulflow.storage.beneath import Beneath, RefusedPath, relative_parts


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "MEMORY.md").write_text("facts\n")
    (ws / "runtime" / "security").mkdir(parents=True)
    (ws / "runtime" / "security" / "master.key").write_bytes(b"K" * 32)
    (tmp_path / "outside.txt").write_text("host file\n")
    return ws


def test_reads_a_plain_file(root: Path, resolver: str) -> None:
    assert Beneath(root).read_text("memory/MEMORY.md") == "facts\n"
    assert Beneath(root).read_text("memory/missing.md") == ""


@pytest.mark.parametrize("target", ["../outside.txt", "runtime/security/master.key"])
def test_a_link_as_the_file_is_refused(root: Path, resolver: str, target: str) -> None:
    link = root / "skills" / "x" / "SKILL.md"
    link.parent.mkdir(parents=True)
    link.symlink_to(root / target)
    with pytest.raises(RefusedPath, match="symbolic link"):
        Beneath(root).read_bytes("skills/x/SKILL.md")


def test_a_link_in_a_parent_is_refused(root: Path, resolver: str) -> None:
    (root / "templates").symlink_to(root / "runtime" / "security")
    with pytest.raises(RefusedPath):
        Beneath(root).read_bytes("templates/master.key")


def test_climbing_and_absolute_paths_are_refused(root: Path) -> None:
    for bad in ("../outside.txt", "/etc/passwd", "a/\x00b"):
        with pytest.raises(RefusedPath):
            relative_parts(bad)


def test_a_fifo_is_refused_without_blocking(root: Path, resolver: str) -> None:
    os.mkfifo(root / "HEARTBEAT.md")
    with pytest.raises(RefusedPath, match="not a regular file"):
        Beneath(root).read_bytes("HEARTBEAT.md")


def test_append_through_a_planted_link_never_writes_the_target(
        root: Path, tmp_path: Path, resolver: str) -> None:
    (root / "memory" / "2026-01-01.md").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(RefusedPath):
        Beneath(root).append_text("memory/2026-01-01.md", "consolidated\n")
    assert (tmp_path / "outside.txt").read_text() == "host file\n"


def test_write_replaces_a_link_not_its_target(root: Path, tmp_path: Path, resolver: str) -> None:
    (root / "memory" / "note.md").symlink_to(tmp_path / "outside.txt")
    Beneath(root).write_atomic("memory/note.md", b"new\n")
    assert (tmp_path / "outside.txt").read_text() == "host file\n"
    assert not (root / "memory" / "note.md").is_symlink()
    assert (root / "memory" / "note.md").read_text() == "new\n"


def test_write_under_a_linked_parent_is_refused(root: Path, tmp_path: Path,
                                                resolver: str) -> None:
    (root / "chats").mkdir()
    (root / "chats" / "a").symlink_to(tmp_path)
    with pytest.raises(RefusedPath):
        Beneath(root).write_atomic("chats/a/outside.txt", b"x")
    assert (tmp_path / "outside.txt").read_text() == "host file\n"


def test_listing_and_walking_never_follow_links(root: Path, resolver: str) -> None:
    (root / "memory" / "link").symlink_to(root / "runtime")
    names = {e.name: e.kind for e in Beneath(root).list_dir("memory")}
    assert names == {"MEMORY.md": "file", "link": "link"}
    walked = [(top, sorted(dirs), sorted(files)) for top, dirs, files in
              Beneath(root).walk("memory")]
    assert walked == [("memory", [], ["MEMORY.md", "link"])]


def test_a_parent_swapped_for_a_link_mid_read_never_yields_the_key(
        root: Path, resolver: str) -> None:
    """The race of finding 8: a thread keeps swapping a directory for a link to runtime/
    while reads run; no read may return the key."""
    (root / "notes").mkdir()
    (root / "notes" / "master.key").write_text("decoy\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(root / "notes", root / "notes.real")
            os.symlink(root / "runtime" / "security", root / "notes")
            os.unlink(root / "notes")
            os.rename(root / "notes.real", root / "notes")

    swapper = threading.Thread(target=swap)
    swapper.start()
    seen: set[bytes] = set()
    try:
        for _ in range(400):
            try:
                seen.add(Beneath(root).read_bytes("notes/master.key"))
            except OSError:
                pass
    finally:
        stop.set()
        swapper.join()
    assert b"K" * 32 not in seen
