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
    once per lease, not once per message. Reading it, offering a plan and taking it off review
    are one round trip each on the asynchronous client, so a slow Redis holds the chat, not
    the event loop."""

    def __init__(self, keys: TaskKeys, *, client: AsyncStoreRedis,
                 fence: Fence = no_fence) -> None:
        self._client = client
        self._key = keys.proposals
        self._fence = fence
        self._known: OrderedDict[str, tuple[int, Proposal | None]] = OrderedDict()
        self._writes = 0  # writes started here: one that overlapped another is not cached

    async def get(self, chat_key: str) -> Proposal | None:
        """The chat's plan: known here (read or written under the chat's current lease), else
        one round trip on the asynchronous client, kept if the lease and no write changed
        meanwhile."""
        token = self._fence(chat_key) or 0
        known = self._known.get(chat_key)
        if known is not None and token and known[0] == token:
            return known[1]
        writes = self._writes
        proposal = _proposal(await self._client.hget(self._key, chat_key))
        if (self._fence(chat_key) or 0) == token and self._writes == writes:
            self._keep(chat_key, token, proposal)
        return proposal

    async def put(self, chat_key: str, proposal: Proposal) -> None:
        token, writes = self._started(chat_key)
        await self._client.hset(self._key, chat_key, json.dumps(asdict(proposal), default=str))
        self._settled(chat_key, token, writes, proposal)

    async def pop(self, chat_key: str) -> Proposal | None:
        token, writes = self._started(chat_key)
        pipe = self._client.pipeline(transaction=True)
        pipe.hget(self._key, chat_key)
        pipe.hdel(self._key, chat_key)
        raw, _ = await pipe.execute()
        self._settled(chat_key, token, writes, None)
        return _proposal(raw)

    def _started(self, chat_key: str) -> tuple[int, int]:
        """A write begins: nothing known of the chat until it is done (a `get` meanwhile
        reads Redis); (the chat's lease token, this write's number)."""
        self._known.pop(chat_key, None)
        self._writes += 1
        return self._fence(chat_key) or 0, self._writes

    def _settled(self, chat_key: str, token: int, writes: int,
                 proposal: Proposal | None) -> None:
        """Keep what this node just wrote, unless the chat's lease changed meanwhile or
        another write started while this one was on its way (Redis may have applied the
        two in either order: the next `get` reads which)."""
        if (self._fence(chat_key) or 0) == token and self._writes == writes:
            self._keep(chat_key, token, proposal)
        else:
            self._known.pop(chat_key, None)

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
