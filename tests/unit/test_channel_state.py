from __future__ import annotations

from pathlib import Path

from soulflow.channels.state import ChannelState


def test_state_persists_and_survives_corruption(tmp_path: Path) -> None:
    path = tmp_path / "cursors" / "telegram.json"
    state = ChannelState(path)
    assert state.get("offset") is None
    state.set("offset", 42)
    state.update({"primed": True, "offset": 43})
    assert ChannelState(path).snapshot() == {"offset": 43, "primed": True}
    path.write_text("{broken")
    assert ChannelState(path).get("offset") is None
    assert list(path.parent.glob("telegram.json.corrupt-*"))
