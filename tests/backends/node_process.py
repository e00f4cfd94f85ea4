"""A Redis-backend node in its own process, for tests that kill one with SIGKILL.

`python -m tests.backends.node_process URL PREFIX NODE_ID PARTITIONS TTL_S CHATS PER_CHAT`
accepts PER_CHAT messages in each of CHATS chats, claims every one it holds, queues one reply
per claimed chat, prints `claimed <n>` and then keeps its leases alive, completing nothing,
until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from tests.backends.helpers import inbound, outbound


async def main(url: str, prefix: str, node_id: str, partitions: int, ttl_s: float,
               chats: int, per_chat: int) -> None:
    backend = RedisBackend(AsyncStoreRedis.from_url(url), node_id=node_id, prefix=prefix,
                           partitions=partitions, lease_ttl_s=ttl_s)
    await backend.start()
    for n in range(per_chat):
        for chat in range(chats):
            await backend.inbound.accept(inbound(f"chat{chat}", n))
    claimed = await backend.inbound.claim(limit=10_000)
    for chat in sorted({m.chat_id for m in claimed}):
        await backend.outbox.put(outbound(chat, f"reply from {node_id}"))
    print(f"claimed {len(claimed)}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    url, prefix, node_id, partitions, ttl_s, chats, per_chat = sys.argv[1:8]
    asyncio.run(main(url, prefix, node_id, int(partitions), float(ttl_s), int(chats),
                     int(per_chat)))
