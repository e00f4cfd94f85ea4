"""`soulflow dlq list|replay|purge`: through the running daemon, or on the files when idle.

Only the process holding the workspace lock touches the journals, so with a daemon running
these commands go through its API; otherwise they take the lock themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from typing import Any

from soulflow.backends.wiring import BackendConfig, open_backend
from soulflow.bus.bus import MessageBus
from soulflow.cli.client import DaemonClient
from soulflow.config import Settings
from soulflow.storage.lock import WorkspaceLock


def _offline(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    lock = WorkspaceLock(settings.runtime_dir / "daemon.lock")
    with lock:
        return asyncio.run(_on_backend(settings, args))


async def _on_backend(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """The command on the configured backend (the files, or Redis: a replay is then sent by
    whichever node holds the chat)."""
    backend = await open_backend(BackendConfig.from_settings(settings), settings.runtime_dir,
                                 join=False)
    bus = MessageBus(backend)
    try:
        if args.dlq_command == "list":
            letters = bus.inbound_dlq if getattr(args, "inbound", False) else bus.dlq
            return {"entries": [e.to_dict() for e in await letters.entries()]}
        if args.dlq_command == "replay":
            return {"replayed": await bus.replay_dlq(args.ids or None)}
        return {"purged": await bus.dlq.purge()}
    finally:
        await bus.stop(5.0)
        await backend.stop()  # flushed and closed


def _online(client: DaemonClient, args: argparse.Namespace) -> dict[str, Any]:
    if args.dlq_command == "list":
        return client.get("/api/dlq?inbound=1" if getattr(args, "inbound", False) else "/api/dlq")
    if args.dlq_command == "replay":
        return client.post("/api/dlq/replay", {"ids": args.ids or None})
    return client.post("/api/dlq/purge")


def run_dlq_command(settings: Settings, args: argparse.Namespace) -> int:
    client = DaemonClient.locate(settings)
    result = _online(client, args) if client is not None else _offline(settings, args)
    if args.dlq_command == "list":
        entries = result["entries"]
        if getattr(args, "json", False):
            for entry in entries:
                print(json.dumps(entry, ensure_ascii=False))
            return 0
        if getattr(args, "inbound", False):
            _print_inbound(entries)
            return 0
        if not entries:
            print("The DLQ is empty.")
        for entry in entries:
            when = dt.datetime.fromtimestamp(entry["at"]).isoformat(timespec="seconds")
            preview = entry["content"].replace("\n", " ")[:60]
            print(f"{entry['message_id']}  {when}  {entry['provider']}:{entry['chat_id']}  "
                  f"retries={entry['retry_count']}  {entry['error'][:80]}  | {preview}")
        return 0
    if args.dlq_command == "replay":
        where = "to the running daemon" if client is not None else \
            "to the outbox; they are sent when the daemon starts"
        print(f"Replayed {result['replayed']} dead letter(s) {where}.")
        return 0
    print(f"Purged {result['purged']} dead letter(s).")
    return 0


def _print_inbound(entries: list[dict[str, Any]]) -> None:
    """Quarantined inbound messages: where they came from, the stage that failed, why."""
    if not entries:
        print("No inbound message has been quarantined.")
    for entry in entries:
        when = dt.datetime.fromtimestamp(entry["at"]).isoformat(timespec="seconds")
        preview = (entry.get("content") or entry.get("raw") or "").replace("\n", " ")[:60]
        print(f"{when}  {entry['provider']}:{entry['chat_id']}  {entry['message_id']}  "
              f"from={entry['sender_id']}  {entry['stage']}: {entry['error'][:80]}  | {preview}")
