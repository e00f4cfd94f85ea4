"""`Beneath.rename`: the migration's one move, beneath the root and without following links."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.storage.beneath import Beneath, RefusedPath


def test_moves_a_file_and_creates_the_parents(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.txt").write_text("data")
    Beneath(tmp_path).rename("a/f.txt", "b/c/f.txt")
    assert (tmp_path / "b" / "c" / "f.txt").read_text() == "data"
    assert not (tmp_path / "a" / "f.txt").exists()


def test_an_existing_destination_is_kept(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "f").write_text("new")
    (tmp_path / "g").write_text("old")
    with pytest.raises(FileExistsError):
        Beneath(tmp_path).rename("f", "g")
    assert (tmp_path / "g").read_text() == "old" and (tmp_path / "f").exists()


def test_a_link_is_moved_as_a_link(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").write_text("host")
    (root / "l").symlink_to(tmp_path / "outside")
    Beneath(root).rename("l", "kept/l")
    assert (root / "kept" / "l").is_symlink()
    assert (tmp_path / "outside").read_text() == "host"


def test_a_link_in_the_destination_s_parents_is_refused(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "dst").symlink_to(tmp_path / "elsewhere")
    (root / "f").write_text("x")
    with pytest.raises(RefusedPath):
        Beneath(root).rename("f", "dst/f")
    assert not (tmp_path / "elsewhere" / "f").exists()
