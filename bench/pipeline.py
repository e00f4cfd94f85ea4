"""Pipeline throughput and the latency SoulFlow adds per message.

Messages enter through the local channel (journaled), are answered by the fake model (a
separate process, no delay), and count as done when the outbox marks the reply sent; after the
throughput run the local chats' transcripts (what the user sees) are read back to check that
every message got its answer there.
Throughput: many chats at once. Added latency: one message at a time, end-to-end time minus
the time spent inside the provider call.

    python bench/pipeline.py [--messages 5000] [--chats 100] [--sequential 500]
    python bench/pipeline.py --backend redis [--redis-fsync always|everysec] ...

With `--backend redis` the daemon runs on a private redis-server (AOF on, its own directory)
as one node; the Redis commands per message (`INFO commandstats` delta over the throughput
run) are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import describe_ms, fake_model_process  # noqa: E402
from soulflow.config import load_settings  # noqa: E402
from soulflow.contracts import ProviderResult  # noqa: E402
from soulflow.runtime import create_runtime  # noqa: E402
from tests.backends.redis_server import RedisServer  # noqa: E402


class InProcessEcho:
    """Bench-only model that answers instantly in-process: isolates the pipeline's own cost
    (journals, sessions, outbox, dispatch) from the HTTP client's."""

    name = "phi4_local"

    async def chat(self, messages, tools=None, *, on_stream=None, abort=None):  # type: ignore[no-untyped-def]
        return ProviderResult(content="echo: " + messages[-1]["content"], provider=self.name)

    async def close(self) -> None:
        return None


def answered_in_transcripts(local: Any, chats: int, messages: int) -> int:
    """Messages "message <i>" (posted to chat<i % chats>) that an assistant entry of their own
    chat's transcript answers: the fake model echoes what it is asked, a folded turn every
    message it folds."""
    pattern = re.compile(r"\bmessage (\d+)\b")
    seen: set[int] = set()
    for chat in range(chats):
        for entry in local.messages(f"chat{chat}", limit=10**9):
            if entry.get("role") == "assistant":
                seen.update(i for i in map(int, pattern.findall(str(entry.get("content"))))
                            if i % chats == chat)
    return len(seen & set(range(messages)))


def redis_commands(url: str | None) -> dict[str, int]:
    """Calls per Redis command so far (`INFO commandstats`; empty without Redis). Commands a
    Lua script runs are counted under their own names as well as under EVALSHA."""
    if url is None:
        return {}
    import redis  # noqa: PLC0415 - only the redis mode needs it

    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def describe_commands(before: dict[str, int], after: dict[str, int], messages: int) -> str:
    """The busiest commands per message between two `redis_commands` readings."""
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    delta.pop("info", None)
    total = sum(delta.values())
    top = sorted(delta.items(), key=lambda item: -item[1])[:12]
    return (f"{total / messages:.1f} commands/msg: "
            + ", ".join(f"{name} {calls / messages:.1f}" for name, calls in top if calls))


@dataclass
class RoundTrips:
    """Requests this process sent to Redis (a pipeline or a script is one), counted where
    redis-py writes them to the socket: `sync` from the stores the agent calls on the event
    loop's thread, `async` from the bus."""

    sync: int = 0
    async_: int = 0


@contextmanager
def counting_round_trips() -> Iterator[RoundTrips]:
    """Count `send_packed_command` calls of redis-py's sync and asyncio connections, and of
    the bus's own asyncio connections (soulflow/backends/redis/connections.py), each once
    (bench instrumentation: the call itself is unchanged)."""
    import redis.asyncio.connection as async_connection  # noqa: PLC0415
    import redis.connection as sync_connection  # noqa: PLC0415

    from soulflow.backends.redis import connections  # noqa: PLC0415

    counts = RoundTrips()
    lean = connections.ScopedWriteTimeout
    sync_send = sync_connection.AbstractConnection.send_packed_command
    async_send = async_connection.AbstractConnection.send_packed_command
    lean_send = lean.send_packed_command

    def counted_sync(self, command, check_health=True):  # type: ignore[no-untyped-def]
        counts.sync += 1
        return sync_send(self, command, check_health)

    async def counted_async(self, command, check_health=True):  # type: ignore[no-untyped-def]
        if not isinstance(self, lean):  # a lean connection's call was counted already
            counts.async_ += 1
        return await async_send(self, command, check_health)

    async def counted_lean(self, command, check_health=True):  # type: ignore[no-untyped-def]
        counts.async_ += 1
        return await lean_send(self, command, check_health)

    sync_connection.AbstractConnection.send_packed_command = counted_sync  # type: ignore[method-assign]
    async_connection.AbstractConnection.send_packed_command = counted_async  # type: ignore[method-assign]
    lean.send_packed_command = counted_lean  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        sync_connection.AbstractConnection.send_packed_command = sync_send  # type: ignore[method-assign]
        async_connection.AbstractConnection.send_packed_command = async_send  # type: ignore[method-assign]
        lean.send_packed_command = lean_send  # type: ignore[method-assign]


@contextmanager
def redis_server(backend: str, fsync: str) -> Iterator[str | None]:
    """A private redis-server with AOF (`fsync`: always / everysec) for `--backend redis`."""
    if backend != "redis":
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp), "--appendonly", "yes", "--appendfsync", fsync)
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


async def run(base_url: str, messages: int, chats: int, sequential: int, fsync: str,
              in_process: bool = False, redis_url: str | None = None,
              profile: cProfile.Profile | None = None,
              round_trips: RoundTrips | None = None) -> None:
    round_trips = round_trips or RoundTrips()
    with tempfile.TemporaryDirectory() as tmp:
        values = {
            "PROVIDER": "phi4_local", "PHI4_BASE_URL": base_url, "DASHBOARD_ENABLED": "false",
            "AGENT_CONCURRENCY": "64", "OUTBOUND_CONCURRENCY": "64", "JOURNAL_FSYNC": fsync,
            "LOG_LEVEL": "warning"}
        if redis_url is not None:
            values |= {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_url,
                       "SOULFLOW_NODE_ID": "bench"}
        settings = load_settings(Path(tmp), values)
        runtime = create_runtime(settings)
        sent_at: dict[str, float] = {}
        provider_time: list[float] = []
        publish = runtime.hub.publish

        def on_event(kind: str, data: dict) -> None:
            if kind == "outbound.sent":
                sent_at[data["message_id"]] = time.perf_counter()
            publish(kind, data)

        runtime.bus.dispatcher._on_event = on_event
        provider = runtime.providers.get("phi4_local")
        if in_process:
            provider = InProcessEcho()
        runtime.agent.loop._provider = lambda: provider  # the loop asks for its model here
        original_chat = provider.chat

        async def timed_chat(*args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return await original_chat(*args, **kwargs)
            finally:
                provider_time.append(time.perf_counter() - start)

        provider.chat = timed_chat  # type: ignore[method-assign]
        await runtime.start()
        try:
            # warm-up
            await runtime.local.submit("warmup", "hi")
            while runtime.bus.dispatcher.sent_count < 1:
                await asyncio.sleep(0.001)

            # throughput
            base = runtime.bus.dispatcher.sent_count
            commands = redis_commands(redis_url)
            trips = RoundTrips(round_trips.sync, round_trips.async_)
            start, cpu_start = time.perf_counter(), time.process_time()
            if profile is not None:
                profile.enable()
            await asyncio.gather(*(runtime.local.submit(f"chat{i % chats}", f"message {i}")
                                   for i in range(messages)))
            while runtime.bus.dispatcher.sent_count - base < messages:
                await asyncio.sleep(0.001)
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            if profile is not None:
                profile.disable()
            trips = RoundTrips(round_trips.sync - trips.sync,
                               round_trips.async_ - trips.async_)
            commands_after = redis_commands(redis_url)
            print(f"throughput: {messages} messages over {chats} chats in {elapsed:.2f} s "
                  f"= {messages / elapsed:,.0f} msg/s (fsync={fsync})")
            print(f"answered in the local chats: "
                  f"{answered_in_transcripts(runtime.local, chats, messages)}/{messages} "
                  "(read back from their transcripts)")
            print(f"daemon CPU per message: {1000 * cpu / messages:.3f} ms "
                  f"(ceiling on one core: {messages / cpu:,.0f} msg/s; the fake model runs in "
                  "its own process on the same 2 cores)")
            if redis_url is not None:
                print(f"redis round trips per message: {trips.sync / messages:.1f} sync "
                      f"(event loop blocked), {trips.async_ / messages:.1f} async")
                print("redis: " + describe_commands(commands, commands_after, messages))

            # added latency, one message at a time
            provider_time.clear()
            added: list[float] = []
            totals: list[float] = []
            for i in range(sequential):
                before = runtime.bus.dispatcher.sent_count
                t0 = time.perf_counter()
                await runtime.local.submit("latency", f"ping {i}")
                while runtime.bus.dispatcher.sent_count == before:
                    await asyncio.sleep(0)
                total = time.perf_counter() - t0
                totals.append(total)
                added.append(total - provider_time[-1])
            print(f"end-to-end per message (incl. fake model HTTP): {describe_ms(totals)}")
            print(f"latency added by SoulFlow (end-to-end minus provider call): "
                  f"{describe_ms(added)}")
        finally:
            await runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--sequential", type=int, default=500)
    parser.add_argument("--fsync", default="interval", choices=["interval", "always", "never"])
    parser.add_argument("--in-process-model", action="store_true",
                        help="answer with an instant in-process echo instead of the fake HTTP "
                             "model, to measure the pipeline without the HTTP client")
    parser.add_argument("--backend", default="file", choices=["file", "redis"])
    parser.add_argument("--redis-fsync", default="always", choices=["always", "everysec"],
                        help="the private redis-server's appendfsync (--backend redis)")
    parser.add_argument("--profile", metavar="FILE",
                        help="cProfile the throughput run into FILE (pstats format)")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    with (fake_model_process() as base_url, redis_server(args.backend, args.redis_fsync) as url,
          counting_round_trips() as round_trips):
        asyncio.run(run(base_url, args.messages, args.chats, args.sequential, args.fsync,
                        args.in_process_model, url, profile, round_trips))
    if profile is not None:
        profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
