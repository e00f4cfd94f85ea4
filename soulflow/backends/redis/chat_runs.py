"""A chat's unfinished runs as the node holding the chat knows them (runs.py).

Every turn asks whether its chat has a run waiting for a decision or an answer, and whether
its message already has a run (a crash interrupted it). Both are answered from this node's
copy of the chat's open runs, read once (ahead of the turn, on the asynchronous client) and
kept up to date by the node's own appends, while the node holds the chat's partition under
the lease token it was read with: only the chat's holder appends to its runs, so nothing can
have changed meanwhile. Another token (the lease moved, or was taken anew) drops the copy.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from soulflow.agent.run.reducer import RunState
from soulflow.backends.redis.fencing import Fence

Meta = dict[str, Any]  # what `runs:meta` keeps of a run (`index_meta`)


def index_meta(state: RunState) -> Meta:
    """What the open-run indexes keep of a run (`runs:meta`)."""
    return {"status": state.status, "chat": state.chat.key, "inbound": state.inbound_key,
            "task": bool(state.chat.task_id), "parent": state.parent_run}


def matches(meta: Meta, inbound_key: str | None, chat_key: str | None,
            statuses: frozenset[str] | None) -> bool:
    """A run's meta answers a `find()` with these filters (None: any)."""
    if statuses is not None and meta.get("status") not in statuses:
        return False
    if inbound_key is not None and meta.get("inbound") != inbound_key:
        return False
    return chat_key is None or meta.get("chat") == chat_key


class ChatRuns:
    """The open runs (run id → meta, oldest first) of the chats this node holds, each with
    the lease token it was read under; at most `cap` chats (the least recently used go)."""

    def __init__(self, fence: Fence, cap: int) -> None:
        self._fence = fence
        self._cap = cap
        self._chats: OrderedDict[str, tuple[int, dict[str, Meta]]] = OrderedDict()
        self._appends: dict[str, int] = {}  # chat → appends to its runs (`appended`)

    def current(self, chat_key: str) -> dict[str, Meta] | None:
        """The chat's open runs, while they are current (else None: read them)."""
        known = self._chats.get(chat_key)
        if known is None:
            return None
        token, runs = known
        if token and (self._fence(chat_key) or 0) == token:
            self._chats.move_to_end(chat_key)
            return runs
        del self._chats[chat_key]
        return None

    def keep(self, chat_key: str, rows: list[tuple[str, Any]],
             queued: list[tuple[str, RunState]]) -> None:
        """Remember the chat's open runs as just read (`rows`: run id, meta json or None),
        with `queued`, this node's runs of the chat whose events Redis does not have yet."""
        token = self._fence(chat_key) or 0
        if not token:
            return
        runs = {run_id: json.loads(raw) for run_id, raw in rows if raw is not None}
        for run_id, state in queued:
            runs.pop(run_id, None)
            if not state.finished:
                runs[run_id] = index_meta(state)
        self._chats[chat_key] = (token, runs)
        while len(self._chats) > self._cap:
            self._chats.popitem(last=False)

    def note(self, run_id: str, state: RunState) -> None:
        """This node appended to a run: its chat's copy follows (a finished run leaves it)."""
        chat_key = state.chat.key
        if len(self._appends) > 4 * self._cap:
            self._appends.clear()
        self._appends[chat_key] = self._appends.get(chat_key, 0) + 1
        runs = self.current(chat_key)
        if runs is None:
            return
        if state.finished:
            runs.pop(run_id, None)
        else:
            runs[run_id] = index_meta(state)

    def appended(self, chat_key: str) -> int:
        """How many appends this node made to the chat's runs (lately): a read ahead that
        saw it change while it waited is not kept."""
        return self._appends.get(chat_key, 0)

    def drop(self, chat_key: str) -> None:
        """Forget the chat's copy (a write of this node was refused: read it again)."""
        self._chats.pop(chat_key, None)
