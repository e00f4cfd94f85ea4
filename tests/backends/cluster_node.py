"""A reference node: the Redis backend composed as the daemon is to compose it, in its own process.

The daemon does not run on Redis yet (docs/scaling.md). This node does the same jobs with the
same stores, against the Telegram fake over real HTTP, so the cluster test can SIGKILL one and
check the design end to end: the account's leader polls `getUpdates` (and stops the moment its
lease is in doubt), journals each update before moving the cursor, and moves the cursor fenced
by its lease; every node runs the messages of the partitions it holds, one at a time, queues a
reply unless one was already queued (`answered`), completes the message, and sends the replies
of its partitions in order.

    python -m tests.backends.cluster_node REDIS_URL PREFIX NODE_ID TELEGRAM_URL TOKEN TTL_S

Prints `ready`, then `leader` / `follower` on each change and `409` for each conflict seen.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx

from soulflow.backends.leader import LeaderElection
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.bus.messages import InboundMessage, OutboundMessage

PARTITIONS = 8


class ClusterNode:
    def __init__(self, backend: RedisBackend, api: str, ttl_s: float) -> None:
        self.backend = backend
        self.api = api
        self.http = httpx.AsyncClient(timeout=10)
        self.election = LeaderElection(
            backend.leases, "account:telegram", backend.node_id, ttl_s=ttl_s,
            on_change=lambda up: print("leader" if up else "follower", flush=True))

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        response = await self.http.post(f"{self.api}/{method}", json=params)
        body = response.json()
        if response.status_code == 409:
            print("409", flush=True)
        if not body.get("ok"):
            raise RuntimeError(f"{method}: {response.status_code} {body.get('description')}")
        return body["result"]

    async def read_loop(self) -> None:
        """While leader: long-poll, journal, then move the cursor (fenced)."""
        while True:
            lease = self.election.lease
            if lease is None:
                await asyncio.sleep(0.05)
                continue
            offset = (await self.backend.cursors.load("telegram")).get("offset", 0)
            poll = asyncio.create_task(self.call("getUpdates", {"offset": offset, "timeout": 1}),
                                       name="getUpdates")
            while not poll.done() and self.election.is_leader:
                await asyncio.wait({poll}, timeout=0.05)
            if not poll.done():  # leadership in doubt: stop polling at once
                poll.cancel()
                continue
            try:
                updates = poll.result()
            except RuntimeError:
                await asyncio.sleep(0.1)
                continue
            for update in updates:
                message = update["message"]
                await self.backend.inbound.accept(InboundMessage(
                    provider="telegram", chat_id=str(message["chat"]["id"]),
                    message_id=str(message["message_id"]),
                    sender_id=str(message["from"]["id"]), text=message.get("text", "")))
            if updates:
                await self.backend.cursors.update(
                    "telegram", {"offset": updates[-1]["update_id"] + 1}, lease=lease)

    async def work_loop(self) -> None:
        """Run claimed messages one at a time, then send this node's replies in order."""
        inbound, outbox = self.backend.inbound, self.backend.outbox
        while True:
            claimed = await inbound.claim(limit=20, wait_s=0.1)
            for message in claimed:
                if not await outbox.has_answered(message.key):
                    await outbox.put(OutboundMessage(
                        provider="telegram", chat_id=message.chat_id,
                        content=f"echo {message.text}", inbound_key=message.key))
                await inbound.complete(message.key, "answered")
            entries = await outbox.pending()
            for entry in entries:
                if not await outbox.record_sending(entry.message.message_id):
                    continue  # its partition moved: the new holder sends it
                try:
                    await self.call("sendMessage", {"chat_id": entry.message.chat_id,
                                                    "text": entry.message.content})
                except (RuntimeError, httpx.HTTPError) as exc:
                    await outbox.record_attempt(entry.message.message_id, entry.attempts + 1,
                                                0.0, str(exc))
                    break  # keep the chat's order: retry this one first
                await outbox.mark_sent(entry.message.message_id)


async def main(url: str, prefix: str, node_id: str, telegram: str, token: str,
               ttl_s: float) -> None:
    backend = RedisBackend(AsyncStoreRedis.from_url(url, socket_timeout=ttl_s / 2), node_id=node_id,
                           prefix=prefix, partitions=PARTITIONS, lease_ttl_s=ttl_s)
    await backend.start()
    node = ClusterNode(backend, f"{telegram}/bot{token}", ttl_s)
    node.election.start()
    print("ready", flush=True)
    await asyncio.gather(
        asyncio.create_task(node.read_loop(), name=f"read-{node_id}"),
        asyncio.create_task(node.work_loop(), name=f"work-{node_id}"))


if __name__ == "__main__":
    redis_url, key_prefix, name, telegram_url, bot_token, ttl = sys.argv[1:7]
    asyncio.run(main(redis_url, key_prefix, name, telegram_url, bot_token, float(ttl)))
