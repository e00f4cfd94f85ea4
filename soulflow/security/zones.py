"""The workspace's three trust zones, and which chat zone a run works in.

Several people share one bot and the model may be prompt-injected, so the workspace is cut
in three (docs/security.md, "Trust zones"):

* **operator**: everything the operator deploys or configures — code, virtualenvs, ``.git``,
  ``scripts/``, ``.env*``, ``mcp.json``, ``templates/``, ``agents/``, ``skills/``,
  ``HEARTBEAT.md``, global memory ``memory/`` — and anything else in the workspace that is
  not below. Every run reads it (as context); tools read it, never write it, except through
  a call an admin or the local operator approved.
* **chat**: ``chats/<zone>/``, one folder per chat: its working files, ``files/`` (what
  people sent in that chat) and ``memory/`` (that chat's long-term facts and daily notes).
  Only runs of that chat read or write it, within a disk quota.
* **daemon**: ``runtime/`` — journals, sessions, the vault and its key. No tool reaches it.

A chat's zone is named from the chat (`zone_for`): ``<provider>-<chat id>``, made safe for a
file name; runs nobody typed (the heartbeat, quiet cron jobs) get a zone of their own, named
from their session, so a periodic check never loads or writes a person's memory. Threads of
one chat share its zone; a DM is a chat of its own, so a DM's zone is never a group's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath

from soulflow.contracts import QUIET_TURN_ORIGIN, ChatRef

__all__ = [
    "CHATS_DIR",
    "MCP_CONFIG_FILE",
    "OPERATOR_MEMORY_DIR",
    "ChatZone",
    "Zone",
    "zone_for",
    "zone_of_path",
    "zone_named",
]

CHATS_DIR = "chats"
MCP_CONFIG_FILE = "mcp.json"  # which programs and servers the daemon runs as MCP tools
RUNTIME_DIR = "runtime"
OPERATOR_MEMORY_DIR = "memory"
FILES_DIR = "files"
MEMORY_DIR = "memory"
_SAFE = re.compile(r"[^A-Za-z0-9_.@-]")
_MAX_NAME = 80


class Zone(StrEnum):
    """Who a workspace path belongs to."""

    OPERATOR = "operator"
    CHAT = "chat"
    DAEMON = "daemon"


@dataclass(frozen=True, slots=True)
class ChatZone:
    """One chat's folder, ``chats/<name>/``; every path here is workspace-relative."""

    name: str

    @property
    def rel(self) -> PurePosixPath:
        return PurePosixPath(CHATS_DIR, self.name)

    @property
    def files_rel(self) -> PurePosixPath:
        """Where attachments people sent in this chat are saved."""
        return self.rel / FILES_DIR

    @property
    def memory_rel(self) -> PurePosixPath:
        """This chat's ``MEMORY.md`` and daily notes."""
        return self.rel / MEMORY_DIR

    def path(self, workspace: Path) -> Path:
        return Path(workspace) / self.rel

    def contains(self, rel: PurePosixPath) -> bool:
        """Whether the workspace-relative ``rel`` lies in this zone (the folder included)."""
        return rel == self.rel or rel.is_relative_to(self.rel)


def _safe_name(raw: str) -> str:
    """``raw`` as a file name: kept when it is already safe, else the safe characters plus
    a digest of the original, so two chat ids never share a folder."""
    cleaned = _SAFE.sub("_", raw).lstrip(".") or "chat"
    if cleaned == raw and len(raw) <= _MAX_NAME:
        return raw
    digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned[:_MAX_NAME - 11]}-{digest}"


def zone_named(provider: str, chat_id: str) -> ChatZone:
    """The zone of the chat ``provider:chat_id`` (what people in that chat share)."""
    return ChatZone(_safe_name(f"{provider}-{chat_id}"))


def zone_for(chat: ChatRef) -> ChatZone:
    """The zone a run of ``chat`` works in: the chat's, or for a run nobody typed (the
    heartbeat, a quiet cron job) one of its own named after its session."""
    if chat.origin == QUIET_TURN_ORIGIN and chat.session_key:
        return ChatZone(_safe_name("quiet-" + chat.session_key.replace(":", "-")))
    return zone_named(chat.provider, chat.chat_id)


def zone_of_path(rel: PurePosixPath) -> tuple[Zone, str | None]:
    """The zone of a workspace-relative path, and the chat zone's name when it is one.

    ``chats/`` itself (the folder holding every chat's) counts as daemon-managed: no tool
    lists it, so one chat never learns the names of the others.
    """
    parts = rel.parts
    if not parts:
        return Zone.OPERATOR, None
    head = parts[0].casefold()
    if head == RUNTIME_DIR:
        return Zone.DAEMON, None
    if head == CHATS_DIR:
        if len(parts) < 2:
            return Zone.DAEMON, None
        return Zone.CHAT, parts[1]
    return Zone.OPERATOR, None
