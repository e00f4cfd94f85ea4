"""Plans under review on files: `runtime/tasks/proposals.json`.

A plan with risky steps is shown before it runs; until the requester (or an admin) answers, it
lives here, one per chat, written atomically so a restart keeps it: the answer given after a
restart still starts the task (`tasks/review.py` has the plan itself).
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path

from soulflow.storage.atomic import read_json, write_json_atomic
from soulflow.tasks.review import Proposal


class FileProposalMap:
    """`ProposalMap` in a JSON file: one pending proposal per chat key (`provider:chat_id`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        data = read_json(path, {})  # unreadable: moved aside by read_json, start empty
        self._items: dict[str, Proposal] = {}
        for key, record in (data.items() if isinstance(data, dict) else []):
            try:
                self._items[key] = Proposal.from_dict(record)
            except (KeyError, TypeError, ValueError):
                continue

    async def get(self, chat_key: str) -> Proposal | None:
        return self._items.get(chat_key)

    async def put(self, chat_key: str, proposal: Proposal) -> None:
        with self._lock:
            self._items[chat_key] = proposal
            self._write()

    async def pop(self, chat_key: str) -> Proposal | None:
        with self._lock:
            proposal = self._items.pop(chat_key, None)
            if proposal is not None:
                self._write()
            return proposal

    def _write(self) -> None:
        write_json_atomic(self.path, {k: asdict(v) for k, v in self._items.items()})
