"""Dead letters (outbound and inbound) and channel cursors on Redis.

The DLQs are lists of json records, the same fields as the files in `runtime/dlq/`; the push
that fills one to its cap (`OUTBOUND_DLQ_MAX`, `INBOUND_DLQ_MAX`) renames the list to
`<key>:<UTC stamp>-<hex>` (kept, logged) and the next starts a new one. Cursors are
one hash per channel (account); an update can be fenced by the account's leader lease, so a
reader that was deposed (it lost Redis, another node took over) cannot move the cursor back.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from soulflow.backends.base import INBOUND_DLQ_MAX, OUTBOUND_DLQ_MAX, Lease
from soulflow.backends.redis import scripts
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys
from soulflow.contracts import DeadLetter, InboundDeadLetter, IntakeStage, OutboundMessage
from soulflow.security.dead_letters import build_inbound_letter

log = logging.getLogger(__name__)


async def _push_capped(client: AsyncStoreRedis, key: str, record: str, cap: int,
                       rotate: Any) -> None:
    """RPUSH; the push that fills the list to `cap` moves it aside under a dated name."""
    length = int(await client.rpush(key, record))
    if length < cap:
        return
    target = f"{key}:{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    if int(await rotate(keys=[key, target], args=[cap])):
        log.warning("%s reached its cap of %d entries: renamed it to %s (kept, not listed any "
                    "more); new entries start a new list", key, cap, target)


class RedisDeadLetters:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, *,
                 max_entries: int = OUTBOUND_DLQ_MAX,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._key = keys.dlq_outbound
        self._clock = clock
        self._max_entries = max_entries
        self._purge = client.register_script(scripts.LIST_PURGE)
        self._rotate = client.register_script(scripts.LIST_ROTATE)

    async def add(self, message: OutboundMessage, *, retry_count: int,
                  error: str) -> DeadLetter:
        letter = DeadLetter(self._clock(), message, retry_count, error[:2000])
        await _push_capped(self._client, self._key, json.dumps(letter.to_dict()),
                           self._max_entries, self._rotate)
        return letter

    async def _raw(self, start: int = 0) -> list[tuple[bytes, DeadLetter]]:
        found = []
        for raw in await self._client.lrange(self._key, start, -1):
            try:
                found.append((raw, DeadLetter.from_dict(json.loads(raw))))
            except (TypeError, ValueError):
                continue
        return found

    async def entries(self) -> list[DeadLetter]:
        return [letter for _, letter in await self._raw()]

    async def recent(self, limit: int = 20) -> list[DeadLetter]:
        return [letter for _, letter in await self._raw(-limit)] if limit > 0 else []

    async def remove(self, message_ids: Iterable[str]) -> int:
        """Drop entries by message id: `LREM` of the exact records, so a letter added by
        another node meanwhile is never lost."""
        doomed = set(message_ids)
        removed = 0
        for raw, letter in await self._raw():
            if letter.message.message_id in doomed:
                removed += int(await self._client.lrem(self._key, 1, raw))
        return removed

    async def purge(self) -> int:
        return int(await self._purge(keys=[self._key]))

    async def count(self) -> int:
        return int(await self._client.llen(self._key))


class RedisInboundDeadLetters:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, *,
                 redact: Callable[[str], str] | None = None,
                 max_entries: int = INBOUND_DLQ_MAX,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._key = keys.dlq_inbound
        self._redact = redact
        self._clock = clock
        self._max_entries = max_entries
        self._purge = client.register_script(scripts.LIST_PURGE)
        self._rotate = client.register_script(scripts.LIST_ROTATE)

    async def add(self, *, provider: str, chat_id: str, message_id: str, sender_id: str,
                  stage: IntakeStage | str, error: str, content: str = "", raw: str = "",
                  key: str = "") -> InboundDeadLetter:
        letter = build_inbound_letter(
            at=self._clock(), redact=self._redact, provider=provider, chat_id=chat_id,
            message_id=message_id, sender_id=sender_id, stage=stage, error=error,
            content=content, raw=raw, key=key)
        await _push_capped(self._client, self._key, json.dumps(letter.to_dict()),
                           self._max_entries, self._rotate)
        return letter

    @staticmethod
    def _decode(raws: list[bytes]) -> list[InboundDeadLetter]:
        letters = []
        for raw in raws:
            try:
                letters.append(InboundDeadLetter.from_dict(json.loads(raw)))
            except (TypeError, ValueError):
                continue
        return letters

    async def entries(self) -> list[InboundDeadLetter]:
        return self._decode(await self._client.lrange(self._key, 0, -1))

    async def recent(self, limit: int = 20) -> list[InboundDeadLetter]:
        if limit <= 0:
            return []
        return self._decode(await self._client.lrange(self._key, -limit, -1))

    async def purge(self) -> int:
        return int(await self._purge(keys=[self._key]))

    async def count(self) -> int:
        return int(await self._client.llen(self._key))


class RedisCursors:
    def __init__(self, client: AsyncStoreRedis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._update = client.register_script(scripts.CURSORS_UPDATE)

    async def load(self, channel: str) -> dict[str, Any]:
        raw = await self._client.hgetall(self._keys.cursors(channel))
        return {(k.decode() if isinstance(k, bytes) else k): json.loads(v)
                for k, v in raw.items()}

    async def update(self, channel: str, values: dict[str, Any], *,
                     lease: Lease | None = None) -> bool:
        hash_key = self._keys.cursors(channel)
        lease_key = self._keys.lease(lease.name) if lease is not None else hash_key
        args: list[str] = [lease.value if lease is not None else ""]
        for name, value in values.items():
            args += [name, json.dumps(value)]
        return bool(await self._update(keys=[hash_key, lease_key], args=args))
