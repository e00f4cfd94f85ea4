"""The heartbeat's last tick on files: `runtime/heartbeat/state.json`."""

from __future__ import annotations

from pathlib import Path

from soulflow.storage.atomic import read_json, write_json_atomic


class FileHeartbeatState:
    """`HeartbeatStateStore` in `runtime/heartbeat/state.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, object]:
        data = read_json(self.path, None)
        return data if isinstance(data, dict) else {}

    def save(self, data: dict[str, object]) -> None:
        write_json_atomic(self.path, data)
