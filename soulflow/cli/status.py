"""`soulflow status`: the running daemon's state (`/api/state`), as lines or as JSON.

One line per part (provider, backend, sandbox, disk, MCP servers, local model, channels,
heartbeat and ops, queues, counters), so a glance tells whether the daemon is well and what
to look at. The exit status says it to a script: 0 when well, 1 when a channel is failing or
the daemon reports a problem (`problems` in /api/state), so `soulflow status || alert` works.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from soulflow.cli.client import DaemonClient
from soulflow.config import Settings


def run_status_command(settings: Settings, args: argparse.Namespace) -> int:
    state = DaemonClient.connect(settings).get("/api/state")
    if args.json:
        print(json.dumps(state, indent=2, ensure_ascii=False))
        return 0 if is_well(state) else 1
    return print_status(state)


def print_status(state: dict[str, Any]) -> int:
    """The lines for one `/api/state`; the exit status (see `is_well`)."""
    queues, counters = state["queues"], state["counters"]
    print(f"SoulFlow {state['version']} running (pid {state['pid']}, up {state['uptime_s']}s)")
    print(f"  workspace  {state['workspace']}")
    print(f"  provider   {state['provider'] or 'none configured'}")
    ops_problems = {p.get("message") for p in (state.get("ops") or {}).get("problems") or []}
    for problem in state.get("problems") or []:
        if problem not in ops_problems:  # those are printed with the background's lines
            print(f"  PROBLEM    {clip(problem, 150)}")
    _print_backend(state.get("backend") or {})
    if state.get("sandbox"):
        sandbox = state["sandbox"]
        print(f"  sandbox    {sandbox['mode']} ({sandbox['detail']})")
        if sandbox.get("process_cap"):
            print(f"             {sandbox['process_cap']}")
    _print_disk(state.get("disk") or {})
    _print_mcp(state.get("mcp") or {})
    if state.get("local_model"):
        local = state["local_model"]
        print(f"  local model {local['model']} {local['state']} (pid {local['pid']}, "
              f"{local['rss_mb']} MB, restarts={local['restarts']})")
    _print_channels(state)
    _print_background(state)
    print("  queues     " + ", ".join(f"{k}={v}" for k, v in queues.items()))
    print("  counters   " + ", ".join(f"{k}={v}" for k, v in counters.items()))
    print(f"  sessions   {len(state['sessions'])}")
    return 0 if is_well(state) else 1


def is_well(state: dict[str, Any]) -> bool:
    """No channel failing and no problem reported: what the exit status says."""
    failing = [c for c in state.get("channels") or [] if c.get("status") == "failing"]
    return not failing and not state.get("problems")


def clip(text: str, limit: int) -> str:
    """`text` on one line within `limit` characters, cut at a word's end with "…" (a cut
    mid-word reads like a different word)."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a very long word (a URL) is cut where it must be
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _print_backend(backend: dict[str, Any]) -> None:
    """Where the bus's state lives; with Redis: this node, its partitions, and whether Redis
    answers (a node that lost it takes no new work)."""
    if backend.get("kind") != "redis":
        return
    partitions = backend.get("partitions") or {}
    line = (f"  backend    redis {backend.get('url', '')}, node {backend.get('node_id')}, "
            f"partitions {len(partitions.get('held', []))}/{partitions.get('total', '?')}")
    if not backend.get("connected", True):
        since = backend.get("since")
        when = time.strftime("%H:%M:%S", time.localtime(since)) if since else "?"
        line += f"; UNREACHABLE since {when}: {clip(backend.get('last_error', ''), 100)}"
    print(line)


def _print_disk(disk: dict[str, Any], largest: int = 5) -> None:
    """What the chat folders hold (as last measured, after each write or exec call), their
    quotas, and the largest folders."""
    if not disk:
        return
    quota = disk.get("quota") or {}
    print(f"  disk       {disk.get('chats', 0)} chat folder(s) hold "
          f"{_size(disk.get('bytes', 0))} in {disk.get('files', 0)} files and folders; "
          f"quota per chat {_size(quota.get('chat_bytes', 0))} / "
          f"{quota.get('chat_files', '?')}, per exec call "
          f"{_size(quota.get('exec_bytes', 0))} / {quota.get('exec_files', '?')}")
    for row in (disk.get("largest") or [])[:largest]:
        print(f"    {row['zone']:<30} {_size(row['bytes']):>10} {row['files']:>7} files")


def _print_mcp(mcp: dict[str, Any]) -> None:
    """The MCP servers of mcp.json: each one's state and tools, why one is down."""
    if mcp.get("error"):
        print(f"  mcp        {mcp.get('config', 'mcp.json')} not used: {clip(mcp['error'], 300)}")
    for server in mcp.get("servers") or []:
        where = "sandboxed stdio" if server.get("sandboxed") else "http"
        if server.get("sandboxed") and server.get("network"):
            where += " with network"
        line = (f"  mcp        {server['name']} {server['status']} ({where}), "
                f"{len(server.get('tools') or [])} tool(s)")
        if server.get("restarts"):
            line += f", restarted {server['restarts']}x"
        if server.get("status") == "restarting" and server.get("retry_at"):
            line += f", next start in {max(0, round(server['retry_at'] - time.time()))} s"
        if server.get("last_error"):
            line += f"; last error: {clip(server['last_error'], 300)}"
        print(line)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _print_channels(state: dict[str, Any]) -> None:
    """Each channel's health, and the inbound messages set aside as poison (latest three)."""
    print("  channels")
    for channel in state["channels"]:
        line = f"    {channel['name']:<10} {channel.get('status', '?')}"
        if channel.get("role") == "leader":  # a shared account (redis): this node reads it
            line += f", reading as leader (lease token {channel.get('lease_token')})"
        elif channel.get("role") == "standby":
            line += ", another node reads the account (this one sends)"
        if channel.get("consecutive_failures"):
            line += f", {channel['consecutive_failures']} failed read(s) in a row"
        if channel.get("send_failures"):
            line += f", {channel['send_failures']} failed send(s) in a row"
        if channel.get("restarts"):
            line += f", restarted {channel['restarts']}x"
        if channel.get("last_error"):
            line += f"; last error: {clip(channel['last_error'], 120)}"
        print(line)
    count = state["queues"].get("inbound_dlq", 0)
    if count:
        print(f"  quarantined {count} inbound message(s); see `soulflow dlq list --inbound`")
        for entry in (state.get("inbound_dlq") or [])[-3:]:
            print(f"    {entry['provider']}:{entry['chat_id']} at {entry['stage']}: "
                  f"{clip(entry['error'], 100)}")


def _print_background(state: dict[str, Any]) -> None:
    """The heartbeat's schedule and last result; what ops finds broken and last did."""
    heartbeat = state.get("heartbeat") or {}
    if heartbeat.get("enabled"):
        last = heartbeat.get("last_outcome") or heartbeat.get("last_status") or "not yet"
        print(f"  heartbeat  every {heartbeat['interval_s']:g}s to {heartbeat['target']}, "
              f"last: {last} ({heartbeat.get('model_calls', 0)} model call(s) since start)")
    ops = state.get("ops") or {}
    for problem in ops.get("problems") or []:
        print(f"  problem    {clip(problem['message'], 150)}")
    for action in (ops.get("actions") or [])[-3:]:
        print(f"  watchdog   {action['kind']} {action['target']}: {clip(action['reason'], 120)}")
