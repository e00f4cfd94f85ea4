"""Task plans under review on Redis: the node that takes a chat over finds the plan shown there.

A plan with risky steps waits in its chat for the requester's answer (docs/tasks.md, "Starting
a task"); the answer may be handled by another node than the one that showed the plan.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import asdict

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.fencing import Fence, no_fence
from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.tasks.review import Proposal

log = logging.getLogger(__name__)


CACHED_CHATS = 1024


class RedisProposalMap:
    """`ProposalMap` on Redis: the hash `tasks:proposals`, chat key → the plan under review
    (json). One field per chat, each write one command: the chat's holder writes it, and the
    node that takes the chat over finds it.

    Every message of a chat asks whether a plan waits there, and almost never does one: what
    was read (or written) is kept while this node holds the chat under the same lease token
    (`fencing.py`), since only the chat's holder writes its field; so a chat's field is read
    once per lease, not once per message."""

    def __init__(self, state: StateRedis, keys: TaskKeys, *, fence: Fence = no_fence,
                 client: AsyncStoreRedis | None = None) -> None:
        self._redis = state.client
        self._client = client  # the asynchronous client, for `preload`
        self._key = keys.proposals
        self._fence = fence
        self._known: OrderedDict[str, tuple[int, Proposal | None]] = OrderedDict()

    def get(self, chat_key: str) -> Proposal | None:
        token = self._fence(chat_key) or 0
        known = self._known.get(chat_key)
        if known is not None and token and known[0] == token:
            return known[1]
        proposal = _proposal(self._redis.hget(self._key, chat_key))
        self._keep(chat_key, token, proposal)
        return proposal

    async def preload(self, chat_key: str) -> None:
        """Read the chat's field ahead on the asynchronous client, unless it is known."""
        token = self._fence(chat_key) or 0
        known = self._known.get(chat_key)
        if self._client is None or not token or (known is not None and known[0] == token):
            return
        raw = await self._client.hget(self._key, chat_key)
        if (self._fence(chat_key) or 0) == token and chat_key not in self._known:
            self._keep(chat_key, token, _proposal(raw))

    def put(self, chat_key: str, proposal: Proposal) -> None:
        self._known.pop(chat_key, None)
        self._redis.hset(self._key, chat_key, json.dumps(asdict(proposal), default=str))
        self._keep(chat_key, self._fence(chat_key) or 0, proposal)

    def pop(self, chat_key: str) -> Proposal | None:
        self._known.pop(chat_key, None)
        pipe = self._redis.pipeline(transaction=True)
        pipe.hget(self._key, chat_key)
        pipe.hdel(self._key, chat_key)
        raw, _ = pipe.execute()
        self._keep(chat_key, self._fence(chat_key) or 0, None)
        return _proposal(raw)

    def _keep(self, chat_key: str, token: int, proposal: Proposal | None) -> None:
        if not token:
            return
        self._known[chat_key] = (token, proposal)
        self._known.move_to_end(chat_key)
        while len(self._known) > CACHED_CHATS:
            self._known.popitem(last=False)


def _proposal(raw: bytes | str | None) -> Proposal | None:
    if raw is None:
        return None
    try:
        return Proposal.from_dict(json.loads(raw))
    except (KeyError, TypeError, ValueError):
        log.error("a task plan under review in Redis could not be read; ignored")
        return None
