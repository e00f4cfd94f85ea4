"""A scriptable, loopback OpenAI-compatible server for tests and benches.

Tests queue the responses they need (replies, tool calls, errors, delays, drops, garbage);
anything unscripted gets a deterministic `"echo: <last user message>"`, so end-to-end tests can
check answers without scripting every turn. A response scripted `when=` some text answers only
an agent request (one that offers tools) whose last user message holds that text, whatever
order the daemon's requests arrive in: runs of several chats and background consolidation
requests never take another chat's script. A request whose client hangs up before the whole
response is out (an aborted or cancelled model call) is marked `hung_up`, so a test can see a
call was really cancelled rather than left to finish unread. Run it in the test's loop
(`FakeOpenAI`), in a background thread for sync tests driving a daemon subprocess
(`FakeOpenAIThread`), or alone:
`python -m tests.fakes.openai_api --port 0` prints `READY <base_url>` and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback_base import ServedInBlock

DEFAULT_MODEL = "fake-model"
_Body = str | dict[str, Any] | None


@dataclass(slots=True)
class RecordedRequest:
    """One chat request as the server saw it; header names are lower-cased. `hung_up`: the
    client closed the connection before the response was complete."""

    path: str
    headers: dict[str, str]
    json: Any
    hung_up: bool = False


@dataclass(slots=True)
class Scripted:
    """One queued behaviour. `kind`: reply, tool_calls, error, drop, garbage, delay or recital
    (a reply that repeats what the model was given: see `script_recital`). `seconds` is the
    wait of a delay, or the pause between streamed chunks of a reply."""

    kind: str
    content: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, raw args)
    status: int = 200
    body: _Body = None
    retry_after: float | None = None
    seconds: float = 0.0
    #: an unstreamed answer takes as long as its streamed chunks would (a slow writer either
    #: way: the echo of `--chunk-delay`, so a bench compares streaming on and off fairly)
    pace_whole: bool = False


@dataclass
class _State:
    """Script queue and request log; shared with the test thread, hence the lock."""

    model: str = DEFAULT_MODEL
    delay_s: float = 0.0
    #: USD per token reported as `usage.cost` (as OpenRouter does); None: no cost reported
    cost_per_token: float | None = None
    #: the default echo goes on with this many filler words, streamed `chunk_delay_s` apart
    #: (a model that writes slowly, for the streaming benches)
    echo_words: int = 0
    chunk_delay_s: float = 0.0
    #: every `usage` object the server sent, in order (what a test compares the counts with)
    usages: list[dict[str, Any]] = field(default_factory=list)
    queue: deque[Scripted] = field(default_factory=deque)
    #: responses scripted for the agent requests whose last user message holds the key
    keyed: dict[str, deque[Scripted]] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    call_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    cond: threading.Condition = field(default_factory=threading.Condition)

    def push(self, *items: Scripted, when: str | None = None) -> None:
        with self.cond:
            if when is None:
                self.queue.extend(items)
            else:
                self.keyed.setdefault(when, deque()).extend(items)

    def next_response(self, body: dict[str, Any]) -> tuple[float, Scripted | None]:
        """Pop leading delays plus the next response (None means: use the default echo).
        A response scripted for this request's text (`when=`) goes first."""
        delay = 0.0
        with self.cond:
            if body.get("tools"):
                text = _last_user_text(body["messages"])
                for key, queue in self.keyed.items():
                    if queue and key in text:
                        return 0.0, queue.popleft()
            while self.queue:
                item = self.queue.popleft()
                if item.kind != "delay":
                    return delay, item
                delay += item.seconds
        return delay, None

    def record(self, request: RecordedRequest) -> None:
        with self.cond:
            self.requests.append(request)
            self.cond.notify_all()

    def hang_up(self, request: RecordedRequest) -> None:
        with self.cond:
            request.hung_up = True
            self.cond.notify_all()


class _ScriptingMixin:
    """The scripting API, shared by the in-loop server and its thread runner."""

    _state: _State

    def script_reply(self, content: str, *, chunk_delay_s: float = 0.0,
                     when: str | None = None) -> None:
        """Queue a text reply; `chunk_delay_s` paces streamed chunks (for abort tests).
        `when`: only for an agent request whose last user message holds this text."""
        self._state.push(Scripted("reply", content, seconds=chunk_delay_s), when=when)

    def script_tool_call(
        self, name: str, arguments: dict[str, Any] | str, call_id: str | None = None,
        *, when: str | None = None
    ) -> None:
        """Queue a tool call; a str `arguments` is sent verbatim (e.g. to test invalid JSON)."""
        self.script_tool_calls([(name, arguments, call_id)], when=when)

    def script_tool_calls(
        self, calls: list[tuple[str, dict[str, Any] | str, str | None]], *,
        when: str | None = None
    ) -> None:
        """Queue one answer calling several tools at once: (name, arguments, call id or
        None for a generated one) each, in order."""
        scripted = []
        for name, arguments, call_id in calls:
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            scripted.append((call_id or f"call_{next(self._state.call_ids)}", name, raw))
        self._state.push(Scripted("tool_calls", calls=scripted), when=when)

    def script_recital(self, *, when: str | None = None) -> None:
        """Queue a reply that repeats everything the model was given in that request: its
        system prompt and every tool result, as a careless or talked-into model would tell
        the person it answers. What the daemon put in front of the model is then in the
        chat, where a test can look for what must not be there."""
        self._state.push(Scripted("recital"), when=when)

    def script_error(
        self, status: int, body: _Body = None, retry_after: float | None = None
    ) -> None:
        """Queue an HTTP error; the default body is an OpenAI-style `{"error": {...}}`."""
        self._state.push(Scripted("error", status=status, body=body, retry_after=retry_after))

    def script_delay(self, seconds: float) -> None:
        """Delay the next response (scripted or default) before any byte of it is sent."""
        self._state.push(Scripted("delay", seconds=seconds))

    def script_drop(self) -> None:
        """Close the connection without sending a response."""
        self._state.push(Scripted("drop"))

    def script_garbage(self) -> None:
        """Answer 200 with a body that is neither valid JSON nor valid SSE."""
        self._state.push(Scripted("garbage"))

    def fail_next(self, n: int, status: int = 500) -> None:
        """Queue `n` identical error responses."""
        self._state.push(*(Scripted("error", status=status) for _ in range(n)))

    def reset(self) -> None:
        """Forget queued responses and recorded requests."""
        with self._state.cond:
            self._state.queue.clear()
            self._state.keyed.clear()
            self._state.requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Chat-completion requests received so far (a snapshot copy)."""
        with self._state.cond:
            return list(self._state.requests)

    @property
    def usages(self) -> list[dict[str, Any]]:
        """Every `usage` object sent so far (a copy)."""
        with self._state.cond:
            return [dict(u) for u in self._state.usages]

    @property
    def cost_per_token(self) -> float | None:
        return self._state.cost_per_token

    @cost_per_token.setter
    def cost_per_token(self, value: float | None) -> None:
        self._state.cost_per_token = value

    @property
    def delay_s(self) -> float:
        """Extra delay before every response (for latency tests)."""
        return self._state.delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self._state.delay_s = value


class FakeOpenAI(_ScriptingMixin, ServedInBlock):
    """The server itself, running on the caller's event loop."""

    def __init__(self, *, model: str = DEFAULT_MODEL, delay_s: float = 0.0,
                 cost_per_token: float | None = None) -> None:
        self._state = _State(model=model, delay_s=delay_s, cost_per_token=cost_per_token)
        self._runner: web.AppRunner | None = None
        self._request_seen = asyncio.Event()
        self.base_url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application(client_max_size=256 * 1024**2)  # long histories are legitimate
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # A client hanging up (an aborted provider call) cancels its handler, and stop() cuts
        # short handlers still sleeping through a scripted delay, so teardown stays fast.
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.2
        )
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, port))
        await web.SockSite(runner, sock).start()
        self.base_url = f"http://{host}:{sock.getsockname()[1]}/v1"
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for_requests(self, n: int) -> list[RecordedRequest]:
        """Wait for `n` chat requests (to act mid-request); bound it with asyncio.timeout()."""
        while len(self.requests) < n:
            self._request_seen.clear()
            await self._request_seen.wait()
        return self.requests

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": self._state.model, "object": "model", "created": 0, "owned_by": "fake"}
        return web.json_response({"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body: Any = await request.json()
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = RecordedRequest(request.path, headers, body)
        self._state.record(recorded)
        self._request_seen.set()
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error_response(Scripted("error", status=400, body=_err("bad messages")))
        try:
            return await self._answer(request, body, recorded)
        except asyncio.CancelledError:  # the client hung up (aiohttp cancels the handler)
            self._state.hang_up(recorded)
            raise

    async def _answer(self, request: web.Request, body: dict[str, Any],
                      recorded: RecordedRequest) -> web.StreamResponse:
        delay, item = self._state.next_response(body)
        await asyncio.sleep(delay + self._state.delay_s)
        item = item or Scripted("reply", "echo: " + _last_user_text(body["messages"])
                                + _filler(self._state.echo_words),
                                seconds=self._state.chunk_delay_s, pace_whole=True)
        if item.kind == "recital":
            item = Scripted("reply", _recital(body["messages"]))
        if item.kind == "error":
            return _error_response(item)
        if item.kind == "drop":
            return _drop(request)
        if item.kind == "garbage":
            return _garbage(bool(body.get("stream")))
        if body.get("stream"):
            return await self._stream(request, body, item, recorded)
        if item.pace_whole and item.seconds:  # the chunks' pauses, all before the answer
            await asyncio.sleep(item.seconds * max(0, len(_stream_choices(item)) - 2))
        return web.json_response(self._completion(body, item))

    def _completion(self, body: dict[str, Any], item: Scripted) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": item.content}
        if item.calls:
            message["content"] = item.content or None
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in item.calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": _finish(item)}
        envelope = self._envelope(body, "chat.completion")
        return {**envelope, "choices": [choice], "usage": self._reported(body, item)}

    async def _stream(
        self, request: web.Request, body: dict[str, Any], item: Scripted,
        recorded: RecordedRequest,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        envelope = self._envelope(body, "chat.completion.chunk")
        events = [{**envelope, "choices": [choice]} for choice in _stream_choices(item)]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**envelope, "choices": [], "usage": self._reported(body, item)})
        try:
            for i, event in enumerate(events):
                if i > 1:  # pause after the first content chunk, so tests can abort mid-stream
                    await asyncio.sleep(item.seconds)
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:  # the client hung up mid-stream
            self._state.hang_up(recorded)
        return response

    def _reported(self, body: dict[str, Any], item: Scripted) -> dict[str, Any]:
        """The usage this response reports (with `cost` when a price per token is set),
        logged in `usages`."""
        usage: dict[str, Any] = dict(_usage(body, item))
        with self._state.cond:
            if self._state.cost_per_token is not None:
                usage["cost"] = usage["total_tokens"] * self._state.cost_per_token
            self._state.usages.append(usage)
        return usage

    def _envelope(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        model = body.get("model") if isinstance(body.get("model"), str) else self._state.model
        ident = f"chatcmpl-{len(self._state.requests)}"
        return {"id": ident, "object": kind, "created": int(time.time()), "model": model}


def _stream_choices(item: Scripted) -> list[dict[str, Any]]:
    """The choices OpenAI would stream: role, content pieces, tool-call fragments, finish."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in re.findall(r"\S+\s*|\s+", item.content)]
    for index, (cid, name, args) in enumerate(item.calls):
        function = {"name": name, "arguments": ""}
        deltas.append(
            {"tool_calls": [{"index": index, "id": cid, "type": "function", "function": function}]}
        )
        for start in range(0, len(args), 8):
            fragment = {"index": index, "function": {"arguments": args[start : start + 8]}}
            deltas.append({"tool_calls": [fragment]})
    choices = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
    return [*choices, {"index": 0, "delta": {}, "finish_reason": _finish(item)}]


def _finish(item: Scripted) -> str:
    return "tool_calls" if item.calls else "stop"


def _usage(body: dict[str, Any], item: Scripted) -> dict[str, int]:
    """Deterministic token counts: one token per whitespace-separated word."""
    messages = [m for m in body["messages"] if isinstance(m, dict)]
    prompt = sum(len(_text_of(m.get("content")).split()) for m in messages)
    completion = len(item.content.split()) + sum(len(a.split()) + 1 for _, _, a in item.calls)
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _recital(messages: list[Any]) -> str:
    """The question, then the system prompt and every tool result of a request."""
    told = [_text_of(m.get("content")) for m in messages
            if isinstance(m, dict) and m.get("role") in ("system", "tool")]
    return "\n\n".join([f"You asked: {_last_user_text(messages)}", "I was told:", *told])


def _text_of(content: Any) -> str:
    """Text of a message `content`: a string, or the text parts of a multi-part list."""
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(str(p.get("text", "")) for p in parts)
    return content if isinstance(content, str) else ""


def _err(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error", "code": None}}


def _error_response(item: Scripted) -> web.Response:
    headers = {} if item.retry_after is None else {"Retry-After": f"{item.retry_after:g}"}
    body = _err(f"scripted error {item.status}") if item.body is None else item.body
    if isinstance(body, dict):
        return web.json_response(body, status=item.status, headers=headers)
    return web.Response(text=body, status=item.status, headers=headers)


def _garbage(stream: bool) -> web.Response:
    if stream:
        return web.Response(text="data: {this is not json\n\n", content_type="text/event-stream")
    return web.Response(text="<html>definitely not json", content_type="application/json")


def _drop(request: web.Request) -> web.Response:
    """Abort the TCP connection, so the client sees it closed without any reply."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response()


class FakeOpenAIThread(_ScriptingMixin):
    """Runs a `FakeOpenAI` on its own event loop in a daemon thread, for synchronous tests.
    Scripting touches only the lock-protected state, so it is safe from the test thread."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, **server_options: Any) -> None:
        """`server_options` are FakeOpenAI's keyword arguments (model, delay_s)."""
        self.server = FakeOpenAI(**server_options)
        self._state = self.server._state
        self._address = (host, port)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def __enter__(self) -> FakeOpenAIThread:
        """Start a loop thread and the server on it; returns once the port is bound."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self._call(self.server.start(*self._address))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self.server.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `n` chat requests arrived."""
        with self._state.cond:
            if not self._state.cond.wait_for(lambda: len(self._state.requests) >= n, timeout):
                raise TimeoutError(f"only {len(self._state.requests)} of {n} requests arrived")
            return list(self._state.requests)

    def wait_hung_up(self, index: int, timeout: float = 20.0) -> RecordedRequest:
        """Block until the client of request number `index` (0-based) has hung up."""
        def hung_up() -> bool:
            requests = self._state.requests
            return len(requests) > index and requests[index].hung_up
        with self._state.cond:
            if not self._state.cond.wait_for(hung_up, timeout):
                raise TimeoutError(f"the client of request {index} did not hang up")
            return self._state.requests[index]

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)


def _filler(words: int) -> str:
    return "".join(f" and{i}" for i in range(words)) if words else ""


async def _serve(args: argparse.Namespace) -> None:
    fake = FakeOpenAI(model=args.model, delay_s=args.delay,
                      cost_per_token=args.cost_per_token)
    fake._state.echo_words, fake._state.chunk_delay_s = args.echo_words, args.chunk_delay
    await fake.start(args.host, args.port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"READY {fake.base_url}", flush=True)
    try:
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI-compatible API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before every response")
    parser.add_argument("--cost-per-token", type=float, default=None,
                        help="report usage.cost = total tokens x this (USD), as OpenRouter does")
    parser.add_argument("--echo-words", type=int, default=0,
                        help="filler words after the echo (a longer answer)")
    parser.add_argument("--chunk-delay", type=float, default=0.0,
                        help="seconds between streamed words of the echo (a slow writer)")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
