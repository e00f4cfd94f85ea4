"""The "inbound:claim" loop: the work this node runs comes from the backend's `claim()`.

Reading a channel only journals messages (`ChannelManager.ingest` accepts them); which node
answers them is the backend's decision: with the files, this daemon, each pending message once
per process (so the first round after a restart resumes what the last process left
unfinished); with Redis, the node holding the chat's partition, which also takes over a dead
node's unfinished messages when it takes its partitions. The loop waits in `claim(wait_s=…)`,
so a new message is handed over as soon as it is accepted.

While the store does not answer (Redis lost) the loop backs off, up to a few seconds between
tries, and logs one line when it starts failing and one when it recovers, not one per try.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from soulflow.contracts import InboundMessage

log = logging.getLogger(__name__)

Claim = Callable[..., Awaitable[list[InboundMessage]]]
Take = Callable[[InboundMessage], Awaitable[None]]


@dataclass(slots=True)
class ClaimLoop:
    claim: Claim  # the backend's InboundStore.claim(limit, wait_s=…)
    take: Take  # queue one claimed message for its chat's next turn
    wait_s: float = 1.0  # under the Redis socket timeout (half a lease TTL, at least 1 s)
    limit: int = 100
    backoff: tuple[float, float] = (0.2, 5.0)
    failing_since: float | None = field(default=None, init=False)  # loop time of first failure
    claimed: int = field(default=0, init=False)

    async def round(self, wait_s: float = 0.0) -> int:
        """Claim once and queue what came; the number of messages handed to this node."""
        messages = await self.claim(self.limit, wait_s=wait_s)
        for message in messages:
            await self.take(message)
        self.claimed += len(messages)
        return len(messages)

    async def run(self) -> None:
        """Claim until cancelled (the supervisor's stop)."""
        delay = self.backoff[0]
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.round(self.wait_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.failing_since is None:
                    self.failing_since = loop.time()
                    log.error("inbound: claiming work failed (%s: %s); no new work is taken "
                              "until the store answers", type(exc).__name__, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
                continue
            if self.failing_since is not None:
                log.warning("inbound: claiming work again after %.1f s",
                            loop.time() - self.failing_since)
                self.failing_since = None
            delay = self.backoff[0]
