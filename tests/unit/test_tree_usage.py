"""Measuring a folder tree and undoing what was added to it (`storage.tree_usage`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from soulflow.storage.tree_usage import (
    MAX_DEPTH,
    EntryKind,
    Usage,
    scan,
    undo,
)
from tests.running import REPO_ROOT

NOBODY = 65534  # an ordinary user: the locked-folder scenario means nothing to root


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "zone"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield root, fd
    finally:
        os.close(fd)


def _names(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_bytes_are_apparent_sizes_and_every_entry_counts(tree: tuple[Path, int]) -> None:
    root, fd = tree
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f.txt").write_bytes(b"12345")
    with open(root / "sparse", "wb") as handle:
        handle.truncate(10**9)  # no block on disk, a gigabyte of apparent size
    (root / "hard").hardlink_to(root / "a" / "f.txt")  # the same file: counted once
    (root / "link").symlink_to("/etc/passwd")  # the link itself, never its target
    assert scan(fd).usage == Usage(5 + 10**9 + len("/etc/passwd"), 6)


def test_a_scan_can_stop_past_a_file_bound(tree: tuple[Path, int]) -> None:
    root, fd = tree
    for i in range(50):
        (root / f"f{i}").touch()
    found = scan(fd, max_files=10)
    assert not found.complete and found.usage.files > 10
    assert scan(fd).complete and scan(fd).usage.files == 50


def test_too_deep_a_tree_is_said_so(tree: tuple[Path, int]) -> None:
    root, fd = tree
    deep = root
    for _ in range(MAX_DEPTH + 5):
        deep = deep / "d"
    deep.mkdir(parents=True)
    found = scan(fd)
    assert found.too_deep and not found.exact


def test_the_snapshot_keeps_kind_inode_and_size(tree: tuple[Path, int]) -> None:
    root, fd = tree
    (root / "dir").mkdir()
    (root / "dir" / "f").write_bytes(b"abc")
    entries = scan(fd, keep_entries=True).entries
    assert entries["dir"].kind is EntryKind.DIR
    assert (entries["dir/f"].kind, entries["dir/f"].size) == (EntryKind.FILE, 3)
    assert entries["dir/f"].ino == (root / "dir" / "f").stat().st_ino


def test_undo_removes_what_is_new_and_cuts_back_what_grew(tree: tuple[Path, int]) -> None:
    root, fd = tree
    (root / "kept").mkdir()
    (root / "kept" / "grown.txt").write_text("old\n")
    (root / "same.txt").write_text("same\n")
    (root / "deleted.txt").write_text("bye\n")
    (root / "was-a-file").write_text("x")
    before = scan(fd, keep_entries=True)

    with open(root / "kept" / "grown.txt", "a") as handle:
        handle.write("and a lot more\n")
    (root / "deleted.txt").unlink()
    (root / "was-a-file").unlink()
    (root / "was-a-file").mkdir()  # same name, other kind: new
    (root / "new" / "deep").mkdir(parents=True)
    (root / "new" / "deep" / "big").write_bytes(b"0" * 1000)
    (root / "kept" / "extra").write_text("new")
    (root / "renamed.txt").write_text("moved here")
    report = undo(fd, before.entries)

    assert _names(root) == ["kept", "kept/grown.txt", "same.txt"]
    assert (root / "kept" / "grown.txt").read_text() == "old\n"
    assert (root / "same.txt").read_text() == "same\n"
    assert (report.removed, report.truncated) == (4, 1)
    after = scan(fd)
    assert after.usage.bytes <= before.usage.bytes and after.usage.files <= before.usage.files


def test_undo_never_cuts_another_file_through_a_new_hard_link(
    tree: tuple[Path, int]
) -> None:
    root, fd = tree
    (root / "small.txt").write_text("s")
    (root / "big.bin").write_bytes(b"B" * 5000)
    before = scan(fd, keep_entries=True)
    (root / "small.txt").unlink()
    (root / "small.txt").hardlink_to(root / "big.bin")  # the path now names big.bin
    undo(fd, before.entries)
    assert (root / "big.bin").read_bytes() == b"B" * 5000
    assert not (root / "small.txt").exists()


def test_undo_removes_a_new_tree_deeper_than_the_descriptor_bound(
    tree: tuple[Path, int]
) -> None:
    root, fd = tree
    before = scan(fd, keep_entries=True)
    deep = root / "new"
    for i in range(MAX_DEPTH * 2 + 3):
        deep = deep / ("d" if i % 2 else "e")
    deep.mkdir(parents=True)
    (deep / "leaf").write_text("x")
    undo(fd, before.entries)
    assert list(root.iterdir()) == []


def test_undo_does_not_follow_links(tree: tuple[Path, int], tmp_path: Path) -> None:
    root, fd = tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    before = scan(fd, keep_entries=True)
    (root / "to-dir").symlink_to(outside)
    (root / "to-file").symlink_to(outside / "precious")
    undo(fd, before.entries)
    assert list(root.iterdir()) == []
    assert (outside / "precious").read_text() == "keep me"


def locked_folder_scenario(root: Path) -> None:
    """A chat's own run locked folders (mode 0, or read-only): they are still measured and
    what was added is still undone. Must run as an ordinary user: root reads anything."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = scan(fd, keep_entries=True)
        (root / "locked").mkdir()
        (root / "locked" / "f").write_bytes(b"x" * 100)
        (root / "sealed").mkdir()
        (root / "sealed" / "g").write_bytes(b"y")
        (root / "locked").chmod(0)
        (root / "sealed").chmod(0o500)  # readable, but nothing can be removed from it
        root.chmod(0o500)
        assert scan(fd).usage == Usage(101, 4)
        undo(fd, before.entries)
        assert list(root.iterdir()) == []
    finally:
        os.close(fd)


def test_a_folder_locked_by_its_owner_is_measured_and_undone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        locked_folder_scenario(tmp_path / "zone")
        return
    # root reads a locked folder anyway: run the scenario as nobody, in a folder of its own
    scratch = Path(tempfile.mkdtemp(prefix="soulflow-locked-"))
    os.chown(scratch, NOBODY, NOBODY)
    try:
        # everything is imported first: the interpreter may live where nobody cannot read
        script = ("import os, sys; from pathlib import Path; "
                  "from tests.unit.test_tree_usage import locked_folder_scenario; "
                  f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY}); "
                  "locked_folder_scenario(Path(sys.argv[1]) / 'zone')")
        done = subprocess.run([sys.executable, "-c", script, str(scratch)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    finally:
        for path in scratch.rglob("*"):
            with contextlib.suppress(OSError):
                path.chmod(0o700)
        shutil.rmtree(scratch, ignore_errors=True)
