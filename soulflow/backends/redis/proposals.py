"""Task plans under review on Redis: the node that takes a chat over finds the plan shown there.

A plan with risky steps waits in its chat for the requester's answer (docs/tasks.md, "Starting
a task"); the answer may be handled by another node than the one that showed the plan.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

from soulflow.backends.redis.keys import TaskKeys
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.tasks.review import Proposal

log = logging.getLogger(__name__)


class RedisProposalMap:
    """`ProposalMap` on Redis: the hash `tasks:proposals`, chat key → the plan under review
    (json). One field per chat, each write one command: the chat's holder writes it, and the
    node that takes the chat over finds it."""

    def __init__(self, state: StateRedis, keys: TaskKeys) -> None:
        self._redis = state.client
        self._key = keys.proposals

    def get(self, chat_key: str) -> Proposal | None:
        return _proposal(self._redis.hget(self._key, chat_key))

    def put(self, chat_key: str, proposal: Proposal) -> None:
        self._redis.hset(self._key, chat_key, json.dumps(asdict(proposal), default=str))

    def pop(self, chat_key: str) -> Proposal | None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hget(self._key, chat_key)
        pipe.hdel(self._key, chat_key)
        raw, _ = pipe.execute()
        return _proposal(raw)


def _proposal(raw: bytes | str | None) -> Proposal | None:
    if raw is None:
        return None
    try:
        return Proposal.from_dict(json.loads(raw))
    except (KeyError, TypeError, ValueError):
        log.error("a task plan under review in Redis could not be read; ignored")
        return None
