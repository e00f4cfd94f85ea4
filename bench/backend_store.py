"""The bus's durable stores alone, file backend against Redis with 1, 2 and 3 nodes.

Per message, what the bus does to its stores: accept (journal + dedupe), claim, put a reply in
the outbox, mark it sent, complete. No channel, no model: this is the stores' cost, not the
daemon's pipeline (the daemon does not run on Redis yet, see docs/scaling.md). Each Redis node
is its own process; a private redis-server runs with AOF (`--fsync` picks `always`, `everysec`
or `no`). Reported: messages per second (first accept to last completion) and CPU per message
(every node, the producer and redis-server).

    python bench/backend_store.py [--messages 3000] [--chats 50] [--nodes 1,2,3] [--fsync always]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from soulflow.backends.base import Backend  # noqa: E402
from soulflow.backends.file.backend import FileBackend  # noqa: E402
from soulflow.backends.redis.backend import RedisBackend  # noqa: E402
from soulflow.backends.redis.clients import AsyncStoreRedis  # noqa: E402
from soulflow.contracts import InboundMessage, OutboundMessage  # noqa: E402
from tests.backends.redis_server import RedisServer  # noqa: E402

PARTITIONS = 12


def message(chat: int, n: int) -> InboundMessage:
    return InboundMessage(provider="telegram", chat_id=f"chat{chat}", message_id=str(n),
                          sender_id="u1", text=f"message {n} in chat {chat}")


async def work(backend: Backend, stop: asyncio.Event) -> int:
    """Run claimed messages until `stop` and nothing is left in hand; returns how many."""
    done = 0
    while True:
        claimed = await backend.inbound.claim(limit=50, wait_s=0.05)
        for m in claimed:
            reply = OutboundMessage(provider=m.provider, chat_id=m.chat_id, content="ok",
                                    inbound_key=m.key)
            await backend.outbox.put(reply)
            await backend.outbox.mark_sent(reply.message_id, ["1"])
            await backend.inbound.complete(m.key, "answered")
            done += 1
        if not claimed and stop.is_set():
            return done


async def produce(backend: Backend, messages: int, chats: int) -> None:
    for n in range(messages):
        await backend.inbound.accept(message(n % chats, n))


async def bench_file(messages: int, chats: int, fsync: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        backend = FileBackend(Path(tmp) / "runtime", node_id="bench", fsync=fsync)
        cpu0, t0 = time.process_time(), time.perf_counter()
        stop = asyncio.Event()
        worker = asyncio.create_task(work(backend, stop), name="bench-file-worker")
        await produce(backend, messages, chats)
        stop.set()
        await worker
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        await backend.stop()
    return messages / wall, cpu / messages * 1000


async def node_main(url: str, node_id: str) -> None:
    """A worker node in its own process: runs work until told `stop` on stdin."""
    backend = RedisBackend(AsyncStoreRedis.from_url(url), node_id=node_id, prefix="bench:",
                           partitions=PARTITIONS, lease_ttl_s=4)
    await backend.start()
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), lambda: (sys.stdin.readline(), stop.set()))
    done = await work(backend, stop)
    await backend.stop()
    print(f"done {done}", flush=True)


async def bench_redis(nodes: int, messages: int, chats: int, fsync: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        server = RedisServer(Path(tmp), "--appendonly", "yes", "--appendfsync", fsync)
        server.start()
        procs: list[asyncio.subprocess.Process] = []
        try:
            for i in range(nodes):
                procs.append(await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--node", server.url, f"node{i}", cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE))
            for proc in procs:
                assert proc.stdout is not None
                assert (await proc.stdout.readline()).strip() == b"ready"
            client = AsyncStoreRedis.from_url(server.url)
            await _wait_balanced(client, nodes)
            producer = RedisBackend(client, node_id="producer", prefix="bench:",
                                    partitions=PARTITIONS)  # accepts only; holds no partition
            assert server.process is not None
            watched = [psutil.Process(p.pid) for p in procs] + [psutil.Process(
                server.process.pid)]
            cpu0 = sum(sum(p.cpu_times()[:2]) for p in watched) + time.process_time()
            t0 = time.perf_counter()
            await produce(producer, messages, chats)
            while await producer.inbound.pending_count():
                await asyncio.sleep(0.005)
            wall = time.perf_counter() - t0
            cpu = sum(sum(p.cpu_times()[:2]) for p in watched) + time.process_time() - cpu0
            counts = []
            for proc in procs:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(b"stop\n")
                await proc.stdin.drain()
                counts.append(int((await proc.stdout.readline()).split()[1]))
            assert sum(counts) == messages, counts
            await client.aclose()
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()
            server.stop()
    return messages / wall, cpu / messages * 1000


async def _wait_balanced(client: AsyncStoreRedis, nodes: int, timeout_s: float = 30) -> None:
    """Until every partition is leased and no node holds more than its share."""
    share = -(-PARTITIONS // nodes)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owners = [await client.get(f"bench:lease:part:{p}") for p in range(PARTITIONS)]
        if all(owners):
            held: dict[str, int] = {}
            for owner in owners:
                name = owner.decode().split("|")[0]
                held[name] = held.get(name, 0) + 1
            if len(held) == nodes and max(held.values()) <= share:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError("the nodes did not share the partitions")


async def main(args: argparse.Namespace) -> None:
    print(f"{args.messages} messages over {args.chats} chats; {os.cpu_count()} cores; "
          f"Redis AOF appendfsync {args.fsync}, file journal fsync {args.file_fsync}")
    rate, cpu = await bench_file(args.messages, args.chats, args.file_fsync)
    print(f"file            {rate:8.0f} msg/s   {cpu:6.3f} ms CPU/msg")
    for nodes in [int(n) for n in args.nodes.split(",")]:
        rate, cpu = await bench_redis(nodes, args.messages, args.chats, args.fsync)
        print(f"redis {nodes} node(s) {rate:8.0f} msg/s   {cpu:6.3f} ms CPU/msg")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--node":
        asyncio.run(node_main(sys.argv[2], sys.argv[3]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--fsync", choices=["always", "everysec", "no"], default="always")
    parser.add_argument("--file-fsync", choices=["always", "interval", "never"],
                        default="interval")
    asyncio.run(main(parser.parse_args()))
