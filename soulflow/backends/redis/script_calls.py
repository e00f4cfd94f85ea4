"""Several Lua script calls sent as one pipeline: one round trip for a batch of writes that
must run in the order given (the outbox writer's replies and completions).

The calls go as `EVAL` with the script's text, not `EVALSHA`: after a Redis restart every
script is gone, and a batch of `EVALSHA`s would fail for some calls and run the others, so a
completion could be recorded ahead of the reply queued before it. `EVAL` cannot fail that way;
Redis keeps the compiled script by its digest, so the text costs only its bytes on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from soulflow.backends.redis.clients import AsyncStoreRedis, mapped

__all__ = ["ScriptCall", "run_in_order"]


@dataclass(frozen=True, slots=True)
class ScriptCall:
    source: str
    keys: list[str]
    args: list[Any]


async def run_in_order(client: AsyncStoreRedis, calls: list[ScriptCall]) -> list[Any]:
    """Each call's reply, in order; raises `StoreUnavailable` if Redis did not answer (some
    calls may have run: every caller's writes are idempotent), or the first call's own
    error (`StoreError`) after all of them ran."""
    if not calls:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.execute_command("EVAL", call.source, len(call.keys), *call.keys, *call.args)
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, RedisError):
            raise mapped(reply) from reply
    return list(replies)
