"""Channel cursors on files: one JSON object per channel, `runtime/bus/cursors/<channel>.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soulflow.backends.base import Lease
from soulflow.backends.file.leases import MemoryLeases
from soulflow.storage.atomic import read_json, write_json_atomic


class FileCursors:
    """One JSON object per channel, `runtime/bus/cursors/<channel>.json`: the file and format
    of `channels/state.py`'s ChannelState (which the adapters use directly today), replaced
    atomically on every update."""

    def __init__(self, directory: Path, leases: MemoryLeases) -> None:
        self.directory = directory
        self._leases = leases
        self._cache: dict[str, dict[str, Any]] = {}

    def _data(self, channel: str) -> dict[str, Any]:
        if channel not in self._cache:
            data = read_json(self.directory / f"{channel}.json", {})
            self._cache[channel] = data if isinstance(data, dict) else {}
        return self._cache[channel]

    async def load(self, channel: str) -> dict[str, Any]:
        return dict(self._data(channel))

    async def update(self, channel: str, values: dict[str, Any], *,
                     lease: Lease | None = None) -> bool:
        if lease is not None and not self._leases.is_current(lease):
            return False
        data = self._data(channel)
        changed = {k: v for k, v in values.items() if data.get(k) != v}
        if changed:
            data.update(changed)
            write_json_atomic(self.directory / f"{channel}.json", data)
        return True
