"""Several Lua script calls sent as one pipeline: one round trip for a batch of writes that
must run in the order given (the outbox writer's replies and completions, `run_in_order`),
or for the calls many tasks make at once (the dispatcher's send marks, `CallBatcher`).

The calls go as `EVAL` with the script's text, not `EVALSHA`: after a Redis restart every
script is gone, and a batch of `EVALSHA`s would fail for some calls and run the others, so a
completion could be recorded ahead of the reply queued before it. `EVAL` cannot fail that way;
Redis keeps the compiled script by its digest, so the text costs only its bytes on the wire.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from soulflow.backends.redis.clients import AsyncStoreRedis, mapped
from soulflow.errors import StoreError

__all__ = ["CallBatcher", "ScriptCall", "run_in_order", "send_together"]


@dataclass(frozen=True, slots=True)
class ScriptCall:
    source: str
    keys: list[str]
    args: list[Any]


async def send_together(client: AsyncStoreRedis, calls: list[ScriptCall]
                        ) -> list[Any | StoreError]:
    """Each call's reply, in order, or its own error (`StoreError`); raises
    `StoreUnavailable` if Redis did not answer (some calls may have run)."""
    if not calls:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.execute_command("EVAL", call.source, len(call.keys), *call.keys, *call.args)
        replies = await pipe.execute(raise_on_error=False)
    return [mapped(reply) if isinstance(reply, RedisError) else reply for reply in replies]


async def run_in_order(client: AsyncStoreRedis, calls: list[ScriptCall]) -> list[Any]:
    """Each call's reply, in order; raises `StoreUnavailable` if Redis did not answer (some
    calls may have run: every caller's writes are idempotent), or the first call's own
    error (`StoreError`) after all of them ran."""
    replies = await send_together(client, calls)
    for reply in replies:
        if isinstance(reply, StoreError):
            raise reply
    return replies


@dataclass(slots=True)
class CallBatcher:
    """Script calls that many tasks make independently, sent together: a call made while a
    batch is on its way waits for it to return, then goes with every call made meanwhile,
    in one pipeline. So under load (the dispatcher's workers, one per chat, each marking its
    reply in flight and then sent) the calls of many chats share a round trip. When idle, a
    call goes at once from its caller's own task, as a lone call would. Each caller gets its
    own reply or error; a batch that did not reach Redis fails every call in it
    (`StoreUnavailable`), as each would have alone.

    The calls that queued behind are sent by a short task of their own (`name`), started
    when the call or batch they waited for returns and ended when nothing is left queued; a
    caller cancelled meanwhile stops waiting, and its call may still run, as any call cut
    off in flight."""

    client: AsyncStoreRedis
    name: str
    _queued: list[tuple[ScriptCall, asyncio.Future[Any]]] = field(default_factory=list)
    _sender: asyncio.Task[None] | None = None
    _in_flight: bool = False  # a batch (or a lone call) is on its way

    async def call(self, call: ScriptCall) -> Any:
        if self._in_flight or self._queued:
            return await self._queue(call)
        self._in_flight = True  # idle: this call goes at once, from the caller's task
        try:
            [reply] = await send_together(self.client, [call])
        finally:
            self._in_flight = False
            self._start_sender()  # the calls made meanwhile
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def _queue(self, call: ScriptCall) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append((call, future))
        if not self._in_flight:
            self._start_sender()
        return await future

    def _start_sender(self) -> None:
        if self._queued and (self._sender is None or self._sender.done()):
            self._sender = asyncio.create_task(self._send(), name=self.name)

    async def _send(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            self._in_flight = True
            try:
                replies = await send_together(self.client, [call for call, _ in batch])
            except asyncio.CancelledError:
                for _, future in [*batch, *self._queued]:
                    future.cancel()
                self._queued.clear()
                raise
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self._in_flight = False
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, StoreError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
