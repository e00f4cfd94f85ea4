from __future__ import annotations

from pathlib import Path

from soulflow.channels.state import ChannelState


def test_state_persists_and_survives_corruption(tmp_path: Path) -> None:
    path = tmp_path / "cursors" / "telegram.json"
    state = ChannelState(path)
    assert state.get("offset") is None
    state.set("offset", 42)
    state.update({"primed": True, "offset": 43})
    assert state.flush()  # written by a writer thread, off the event loop
    assert ChannelState(path).snapshot() == {"offset": 43, "primed": True}
    path.write_text("{broken")
    assert ChannelState(path).get("offset") is None
    assert list(path.parent.glob("telegram.json.corrupt-*"))


def test_updates_coalesce_and_the_last_one_lands(tmp_path: Path) -> None:
    """Many quick updates (a Telegram batch each) never block on the disk and never reorder:
    after flush() the file holds the last value."""
    path = tmp_path / "cursors" / "telegram.json"
    state = ChannelState(path)
    for offset in range(500):
        state.set("offset", offset)
    assert state.flush()
    assert ChannelState(path).snapshot() == {"offset": 499}
    assert not list(path.parent.glob(".telegram.json.*.tmp"))


def test_a_durable_update_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    """Priming baselines are written this way: a kill right after must not lose them."""
    path = tmp_path / "telegram.json"
    state = ChannelState(path)
    state.set("offset", 42, durable=True)
    assert ChannelState(path).get("offset") == 42
