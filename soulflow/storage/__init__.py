"""The only code that touches files: atomic JSON, JSONL journals and the workspace lock."""

from soulflow.storage.atomic import quarantine, read_json, write_json_atomic
from soulflow.storage.jsonl import JsonlFile
from soulflow.storage.lock import WorkspaceLock, WorkspaceLocked

__all__ = [
    "JsonlFile",
    "WorkspaceLock",
    "WorkspaceLocked",
    "quarantine",
    "read_json",
    "write_json_atomic",
]
