"""Leader failover on Redis: SIGKILL the node holding an account's lease, time the takeover.

Two node processes run `LeaderElection` for one lease on a private redis-server. Each round
kills the leader with SIGKILL at a random moment and measures the time until the other
announces leadership (CLOCK_MONOTONIC is system-wide on Linux, so the two processes' stamps
compare); the killed node is restarted as the new follower. This is the lease alone: a
daemon's first reply after a takeover adds its first poll and the answer (measured with real
daemons by `python bench/cluster.py failover`).

    python bench/leader_failover.py [--kills 20] [--ttl 6]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import describe_ms  # noqa: E402
from soulflow.backends.leader import LeaderElection  # noqa: E402
from soulflow.backends.redis.clients import AsyncStoreRedis  # noqa: E402
from soulflow.backends.redis.keys import Keys  # noqa: E402
from soulflow.backends.redis.lease import RedisLeases  # noqa: E402
from tests.backends.redis_server import RedisServer  # noqa: E402

LEASE = "account:telegram"


async def node_main(url: str, name: str, ttl_s: float) -> None:
    """Print `leader <monotonic>` when this node takes the lease; run until killed."""
    client = AsyncStoreRedis.from_url(url, socket_timeout=ttl_s / 2)
    election = LeaderElection(
        RedisLeases(client, Keys("failover:", 1)), LEASE, name, ttl_s=ttl_s,
        on_change=lambda up: print(f"leader {time.monotonic()!r}", flush=True) if up else None)
    election.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


class Node:
    def __init__(self, url: str, name: str, ttl_s: float) -> None:
        self.args = (url, name, str(ttl_s))
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--node", *self.args, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE)
        assert self.proc.stdout is not None
        assert (await self.proc.stdout.readline()).strip() == b"ready"

    async def leadership(self, timeout_s: float) -> float:
        """When this node announced leadership (monotonic), waiting up to `timeout_s`."""
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=timeout_s)
        return float(line.split()[1])

    async def kill(self) -> float:
        assert self.proc is not None
        killed_at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        return killed_at


async def main(kills: int, ttl_s: float) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        nodes = [Node(server.url, f"node{i}", ttl_s) for i in range(2)]
        try:
            await nodes[0].start()
            await nodes[0].leadership(ttl_s * 3)
            await nodes[1].start()
            leader, follower = nodes
            takeovers: list[float] = []
            for _ in range(kills):
                # at a random point of the renewal cycle, not in step with the last takeover
                await asyncio.sleep(random.uniform(0, ttl_s))
                killed_at = await leader.kill()
                took_at = await follower.leadership(ttl_s * 3)
                takeovers.append(took_at - killed_at)
                await leader.start()  # back as the follower
                leader, follower = follower, leader
            print(f"lease TTL {ttl_s:g} s, {kills} SIGKILLs of the leader")
            print(f"takeover after the kill: {describe_ms(takeovers)}")
        finally:
            for node in nodes:
                if node.proc is not None and node.proc.returncode is None:
                    node.proc.kill()
                    await node.proc.wait()
            server.stop()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--node":
        asyncio.run(node_main(sys.argv[2], sys.argv[3], float(sys.argv[4])))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--ttl", type=float, default=6.0)
    args = parser.parse_args()
    asyncio.run(main(args.kills, args.ttl))
