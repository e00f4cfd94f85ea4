"""HeadlessCliProvider against the fake CLI (tests/fakes/fake_cli.py via tests/fakes/bin)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from soulflow.contracts import ProviderError
from soulflow.providers.cli import DEFAULT_ARGV, CliProviderResult, HeadlessCliProvider

FAKE_BIN = Path(__file__).resolve().parents[1] / "fakes" / "bin"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


@dataclass
class CliRig:
    """Points PATH at the fake CLIs and scripts them through files under `tmp`."""

    tmp: Path
    made: list[HeadlessCliProvider] = field(default_factory=list)

    def script(self, **script: Any) -> None:
        (self.tmp / "script.json").write_text(json.dumps(script))

    def provider(self, name: str = "chatgpt", **options: Any) -> HeadlessCliProvider:
        options = {"env_allow": ["FAKE_CLI_*"], "timeout_s": 10.0} | options
        provider = HeadlessCliProvider(name, **options)
        self.made.append(provider)
        return provider

    @property
    def record(self) -> dict[str, Any]:
        return json.loads((self.tmp / "record.json").read_text())


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_CLI_PYTHON", sys.executable)
    monkeypatch.setenv("FAKE_CLI_SCRIPT", str(tmp_path / "script.json"))
    monkeypatch.setenv("FAKE_CLI_RECORD", str(tmp_path / "record.json"))
    rig = CliRig(tmp_path)
    rig.script(mode="echo")
    yield rig
    for provider in rig.made:
        await provider.close()


async def expect_error(call: Awaitable[Any]) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await call
    return info.value


def alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie counts as gone (an orphan may wait for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def assert_gone(*pids: int, within_s: float = 20.0) -> None:
    """Wait until every pid is gone (a generous bound: only a process that survives fails)."""
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        await asyncio.sleep(0.01)


class FirstChunk:
    """An on_stream callback that collects chunks and signals the first one."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.seen = asyncio.Event()

    def __call__(self, text: str) -> None:
        self.chunks.append(text)
        self.seen.set()


# -- replies and prompts --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chatgpt", "claude_code"])
async def test_reply_with_prompt_on_stdin(rig: CliRig, name: str) -> None:
    result = await rig.provider(name).chat(MESSAGES)
    assert isinstance(result, CliProviderResult)
    assert result.content == "echo: hi there"
    assert (result.tool_calls, result.finish_reason, result.tool_call_errors) == ([], "stop", [])
    assert result.provider == name
    record = rig.record
    assert record["invoked_as"] == result.model == DEFAULT_ARGV[name][0]
    assert record["argv"] == DEFAULT_ARGV[name][1:]  # the prompt is not on the command line
    assert record["stdin"] == "be brief\n\nUser: hi there\n"
    assert record["pgid"] == record["pid"]  # its own process group, for killing


async def test_conversation_is_flattened_with_tool_instructions(rig: CliRig) -> None:
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "thanks"},
    ]
    result = await rig.provider().chat(messages, TOOLS)
    assert result.content == "echo: thanks"
    prompt = rig.record["stdin"]
    assert prompt.startswith("be brief\n\n# Tools\n")
    assert "### get_weather\n" in prompt
    assert prompt.endswith(
        "User: weather?\n\n"
        'Assistant: Checking.\n```tool_call\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n```\n\n'
        "Tool result (get_weather): sunny\n\n"
        "Assistant: Sunny.\n\n"
        "User: thanks\n"
    )


async def test_configured_argv_and_cwd(rig: CliRig, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    provider = rig.provider("mine", argv=["claude", "-p", "--model", "opus"], cwd=work)
    assert (await provider.chat(MESSAGES)).model == "claude"
    assert rig.record["argv"] == ["-p", "--model", "opus"]
    assert rig.record["cwd"] == str(work)


async def test_tool_call_is_parsed(rig: CliRig) -> None:
    rig.script(mode="tool_call", text="Let me look.", name="get_weather",
               arguments={"city": "Paris"})
    provider = rig.provider()
    result = await provider.chat(MESSAGES, TOOLS)
    [call] = result.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert re.fullmatch(r"call_text_[0-9a-f]{8}_1", call.id)
    assert result.content == "Let me look."
    assert result.finish_reason == "tool_calls"
    # the agent keys approvals by call id, so ids must not repeat across replies
    assert (await provider.chat(MESSAGES, TOOLS)).tool_calls[0].id != call.id


async def test_unknown_tool_is_reported_not_called(rig: CliRig) -> None:
    rig.script(mode="tool_call", name="delete_everything")
    result = await rig.provider().chat(MESSAGES, TOOLS)
    assert isinstance(result, CliProviderResult)
    assert result.tool_calls == []
    assert result.tool_call_errors == [
        "unknown tool 'delete_everything'; available tools: get_weather"
    ]
    assert "delete_everything" in result.content  # the raw block is kept


async def test_garbage_output_is_kept_with_a_tool_call_error(rig: CliRig) -> None:
    rig.script(mode="garbage")
    result = await rig.provider().chat(MESSAGES, TOOLS)
    assert isinstance(result, CliProviderResult)
    assert "\ufffd" in result.content and "noise" in result.content
    assert result.tool_calls == [] and len(result.tool_call_errors) == 1


# -- streaming ------------------------------------------------------------------------------


async def test_streaming_forwards_chunks_as_they_arrive(rig: CliRig) -> None:
    rig.script(mode="chunks", chunks=["Hello", ", wor", "ld!"], delay_s=0.05)
    chunks: list[str] = []
    result = await rig.provider().chat(MESSAGES, on_stream=chunks.append)
    assert chunks == ["Hello", ", wor", "ld!"]
    assert result.content == "Hello, world!"


async def test_streaming_holds_back_tool_blocks(rig: CliRig) -> None:
    rig.script(mode="tool_call", text="Let me look.", name="get_weather",
               arguments={"city": "Paris"})
    chunks: list[str] = []

    async def on_stream(text: str) -> None:
        chunks.append(text)

    result = await rig.provider().chat(MESSAGES, TOOLS, on_stream=on_stream)
    assert "".join(chunks) == "Let me look.\n"
    assert len(result.tool_calls) == 1


# -- abort and timeout ----------------------------------------------------------------------


async def test_abort_kills_the_process_group(rig: CliRig) -> None:
    """The CLI and its child would hang for ever: the aborted error comes back only because
    the abort killed them, and both are gone."""
    rig.script(mode="hang", text="thinking...\n", spawn_child=True)
    stream, abort = FirstChunk(), asyncio.Event()
    task = asyncio.create_task(rig.provider().chat(MESSAGES, on_stream=stream, abort=abort))
    await asyncio.wait_for(stream.seen.wait(), 10)
    pids = rig.record["pid"], rig.record["child_pid"]
    assert all(alive(pid) for pid in pids)
    abort.set()
    error = await expect_error(task)
    assert (error.kind, error.provider) == ("aborted", "chatgpt")
    await assert_gone(*pids)
    assert stream.chunks == ["thinking...\n"]


async def test_abort_escalates_to_sigkill_when_sigterm_is_ignored(rig: CliRig) -> None:
    """The CLI ignores SIGTERM: it is gone only because SIGKILL followed, and not before the
    grace the provider gives a SIGTERM (a lower bound: the wait cannot be shorter)."""
    rig.script(mode="hang", text="stubborn\n", ignore_term=True)
    stream, abort = FirstChunk(), asyncio.Event()
    provider = rig.provider(kill_grace_s=0.3)
    task = asyncio.create_task(provider.chat(MESSAGES, on_stream=stream, abort=abort))
    await asyncio.wait_for(stream.seen.wait(), 10)
    started = time.monotonic()
    abort.set()
    assert (await expect_error(task)).kind == "aborted"
    assert time.monotonic() - started >= 0.3
    await assert_gone(rig.record["pid"])


async def test_abort_before_start_runs_nothing(rig: CliRig) -> None:
    abort = asyncio.Event()
    abort.set()
    assert (await expect_error(rig.provider().chat(MESSAGES, abort=abort))).kind == "aborted"
    assert not (rig.tmp / "record.json").exists()


async def test_timeout_kills_the_process_group(rig: CliRig) -> None:
    """A CLI that hangs: the call ends with the timeout's error, and the group is killed."""
    rig.script(mode="hang", spawn_child=True)
    error = await expect_error(rig.provider(timeout_s=0.5).chat(MESSAGES))
    assert error.kind == "timeout" and error.retryable
    assert "0.5s" in str(error)
    await assert_gone(rig.record["pid"], rig.record["child_pid"])


async def test_close_kills_runs_in_flight(rig: CliRig) -> None:
    rig.script(mode="hang", text="x")
    provider, stream = rig.provider(), FirstChunk()
    task = asyncio.create_task(provider.chat(MESSAGES, on_stream=stream))
    await asyncio.wait_for(stream.seen.wait(), 10)
    await provider.close()
    await assert_gone(rig.record["pid"])
    await expect_error(task)  # the CLI died under it
    assert (await expect_error(provider.chat(MESSAGES))).kind == "not_configured"


# -- failures -------------------------------------------------------------------------------


async def test_nonzero_exit_reports_the_stderr_tail(rig: CliRig) -> None:
    stderr = "".join(f"log line {n}\n" for n in range(100)) + "Error: the model refused\n"
    rig.script(mode="fail", stderr=stderr, exit_code=3)
    error = await expect_error(rig.provider().chat(MESSAGES))
    assert error.kind == "bad_response" and not error.retryable
    message = str(error)
    assert message.startswith("chatgpt: bad_response: `codex` exited with status 3: ...")
    assert message.endswith("log line 99 Error: the model refused")
    tail = message.split("status 3: ", 1)[1]
    assert len(tail) == 300


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        ("ERROR: Rate limit reached for requests\n", "rate_limited"),
        ("You've hit your usage limit. Try again later.\n", "rate_limited"),
        ("API Error: 529 Overloaded\n", "server"),
        ("stream error: 503 Service Unavailable\n", "server"),
        ("Invalid API key · Please run /login\n", "auth"),
        ("Not logged in\n", "auth"),
    ],
)
async def test_nonzero_exit_is_classified(rig: CliRig, stderr: str, kind: str) -> None:
    rig.script(mode="fail", stderr=stderr)
    error = await expect_error(rig.provider().chat(MESSAGES))
    assert error.kind == kind
    assert stderr.strip() in str(error)


async def test_error_text_on_stdout_is_used_when_stderr_is_empty(rig: CliRig) -> None:
    rig.script(mode="fail", stdout="Error: 502 Bad Gateway\n")
    error = await expect_error(rig.provider("claude_code").chat(MESSAGES))
    assert error.kind == "server" and "`claude` exited with status 1" in str(error)


async def test_empty_output_is_bad_response(rig: CliRig) -> None:
    rig.script(mode="empty")
    error = await expect_error(rig.provider().chat(MESSAGES))
    assert error.kind == "bad_response" and "printed nothing" in str(error)


async def test_output_over_the_limit_is_cut_off(rig: CliRig) -> None:
    rig.script(mode="reply", text="x" * 5000)
    error = await expect_error(rig.provider(max_output_bytes=1000).chat(MESSAGES))
    assert error.kind == "bad_response" and "1000 bytes" in str(error)


async def test_missing_executable_is_not_configured(rig: CliRig, tmp_path: Path) -> None:
    provider = rig.provider(environ={"PATH": str(tmp_path)})
    error = await expect_error(provider.chat(MESSAGES))
    assert (error.kind, error.provider) == ("not_configured", "chatgpt")
    assert error.args[0] == (
        "the `codex` command was not found on PATH; install it or choose another PROVIDER"
    )


def test_unknown_name_needs_argv() -> None:
    with pytest.raises(ValueError, match="pass argv"):
        HeadlessCliProvider("mystery")


# -- environment ----------------------------------------------------------------------------


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FOO_TOKEN", "s3cret")
    monkeypatch.setenv("HOME", "/home/test")
    monkeypatch.setenv("LANG", "C.UTF-8")
    yield


@pytest.mark.usefixtures("secret_env")
async def test_only_allowed_env_reaches_the_cli(rig: CliRig) -> None:
    await rig.provider().chat(MESSAGES)
    env = rig.record["env"]
    assert "FOO_TOKEN" not in env
    assert "s3cret" not in json.dumps(env)
    assert env["HOME"] == "/home/test" and env["LANG"] == "C.UTF-8"
    assert env["PATH"].startswith(str(FAKE_BIN))
    assert env["FAKE_CLI_PYTHON"] == sys.executable  # allowed by the FAKE_CLI_* prefix


@pytest.mark.usefixtures("secret_env")
async def test_allow_listed_env_passes(rig: CliRig) -> None:
    await rig.provider(env_allow=["FAKE_CLI_*", "FOO_TOKEN"]).chat(MESSAGES)
    assert rig.record["env"]["FOO_TOKEN"] == "s3cret"
