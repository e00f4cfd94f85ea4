"""Pipeline throughput and the latency SoulFlow adds per message.

Messages enter through the local channel (journaled), are answered by the fake model (a
separate process, no delay), and count as done when the outbox marks the reply sent.
Throughput: many chats at once. Added latency: one message at a time, end-to-end time minus
the time spent inside the provider call.

    python bench/pipeline.py [--messages 5000] [--chats 100] [--sequential 500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import describe_ms, fake_model_process  # noqa: E402
from soulflow.config import load_settings  # noqa: E402
from soulflow.providers.base import ProviderResult  # noqa: E402
from soulflow.runtime import create_runtime  # noqa: E402


class InProcessEcho:
    """Bench-only model that answers instantly in-process: isolates the pipeline's own cost
    (journals, sessions, outbox, dispatch) from the HTTP client's."""

    name = "phi4_local"

    async def chat(self, messages, tools=None, *, on_stream=None, abort=None):  # type: ignore[no-untyped-def]
        return ProviderResult(content="echo: " + messages[-1]["content"], provider=self.name)

    async def aclose(self) -> None:
        return None


async def run(base_url: str, messages: int, chats: int, sequential: int, fsync: str,
              in_process: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(Path(tmp), {
            "PROVIDER": "phi4_local", "PHI4_BASE_URL": base_url, "DASHBOARD_ENABLED": "false",
            "AGENT_CONCURRENCY": "64", "OUTBOUND_CONCURRENCY": "64", "JOURNAL_FSYNC": fsync,
            "LOG_LEVEL": "warning"})
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
            start, cpu_start = time.perf_counter(), time.process_time()
            await asyncio.gather(*(runtime.local.submit(f"chat{i % chats}", f"message {i}")
                                   for i in range(messages)))
            while runtime.bus.dispatcher.sent_count - base < messages:
                await asyncio.sleep(0.001)
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            print(f"throughput: {messages} messages over {chats} chats in {elapsed:.2f} s "
                  f"= {messages / elapsed:,.0f} msg/s (fsync={fsync})")
            print(f"daemon CPU per message: {1000 * cpu / messages:.3f} ms "
                  f"(ceiling on one core: {messages / cpu:,.0f} msg/s; the fake model runs in "
                  "its own process on the same 2 cores)")

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
    args = parser.parse_args()
    with fake_model_process() as base_url:
        asyncio.run(run(base_url, args.messages, args.chats, args.sequential, args.fsync,
                        args.in_process_model))


if __name__ == "__main__":
    main()
