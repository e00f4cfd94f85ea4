"""The approval prompts' messages on files: `runtime/approvals/messages.json` (run approvals)
and `runtime/tasks/prompt-messages.json` (task prompts), `{"<chat>:<platform id>": {"run_id",
"approval_id"}}`."""

from __future__ import annotations

import threading
from pathlib import Path

from soulflow.storage.atomic import read_json
from soulflow.storage.background import BackgroundJsonFile


class FileApprovalMap:
    """`ApprovalMap` in a JSON file: which platform messages announced which approval (so a
    reaction can decide it).

    Remembered right after the prompt is sent, on the event loop: the file is written by a
    writer thread (a crash before it lands only means a reaction to that prompt is not
    recognised; a text reply still decides the approval)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = BackgroundJsonFile(path)
        self._lock = threading.Lock()
        data = read_json(path, {})
        self._map: dict[str, dict[str, str]] = data if isinstance(data, dict) else {}

    @staticmethod
    def _key(chat_key: str, platform_id: str) -> str:
        return f"{chat_key}:{platform_id}"

    def remember(self, chat_key: str, platform_ids: list[str], run_id: str,
                 approval_id: str) -> None:
        with self._lock:
            for platform_id in platform_ids:
                self._map[self._key(chat_key, platform_id)] = {"run_id": run_id,
                                                               "approval_id": approval_id}
            self._file.save(dict(self._map))

    def lookup(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        return self._map.get(self._key(chat_key, platform_id))

    async def find(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        """`lookup`: the map is in memory."""
        return self.lookup(chat_key, platform_id)

    def forget_run(self, run_id: str) -> None:
        with self._lock:
            kept = {k: v for k, v in self._map.items() if v.get("run_id") != run_id}
            if len(kept) != len(self._map):
                self._map = kept
                self._file.save(dict(kept))

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until the map is on disk (shutdown, tests)."""
        return self._file.flush(timeout)
