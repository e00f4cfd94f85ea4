"""The only code that touches files: atomic writes, appends, JSONL journals, background JSON
files and the workspace lock. (Writing a cgroup's control file in the sandbox is a kernel
interface, not state, and stays with the sandbox.)"""

from soulflow.storage.append import append_text
from soulflow.storage.atomic import (
    create_exclusive,
    quarantine,
    read_json,
    replace_durably,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from soulflow.storage.background import BackgroundJsonFile
from soulflow.storage.jsonl import JsonlFile
from soulflow.storage.lock import WorkspaceLock, WorkspaceLocked

__all__ = [
    "BackgroundJsonFile",
    "JsonlFile",
    "WorkspaceLock",
    "WorkspaceLocked",
    "append_text",
    "create_exclusive",
    "quarantine",
    "read_json",
    "replace_durably",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]
