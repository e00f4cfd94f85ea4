"""Small persisted state per channel: cursors, offsets, "primed" flags.

Adapters keep the position they have read up to here (Telegram's update offset, Slack's
last `ts` per channel, ...). It is written atomically, and only from `commit()`, which the
manager calls after the messages are journaled: a crash replays, never skips. The write (two
fsyncs) happens in a writer thread, not on the event loop that commits every batch; an
adapter's `stop()` flushes it. Losing the last cursor advance to a crash only replays messages
the journal already knows; losing a *priming baseline* would make the next start prime again
past messages sent while the daemon was down, so baselines are written with `durable=True`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import read_json
from soulflow.storage.background import BackgroundJsonFile


class ChannelState:
    """A persisted JSON object for one channel: `runtime/bus/cursors/<channel>.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = BackgroundJsonFile(path)
        data = read_json(path, {})
        self._data: dict[str, Any] = data if isinstance(data, dict) else {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def set(self, key: str, value: Any, *, durable: bool = False) -> None:
        """Set and persist one value."""
        self.update({key: value}, durable=durable)

    def update(self, values: dict[str, Any], *, durable: bool = False) -> None:
        """Set several values and hand them to the writer thread in one atomic write.

        ``durable`` waits until the write is on disk: for priming baselines, once per start."""
        with self._lock:
            changed = {k: v for k, v in values.items() if self._data.get(k) != v}
            if not changed:
                return
            self._data.update(changed)
            self._file.save(dict(self._data))
        if durable:
            self._file.flush()

    def snapshot(self) -> dict[str, Any]:
        return dict(self._data)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until the last update is on disk (adapter stop, tests)."""
        return self._file.flush(timeout)
