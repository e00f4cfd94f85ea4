"""The fake OpenAI server speaks the wire format other tests rely on, in all three run modes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fakes.openai_api import FakeOpenAI, FakeOpenAIThread
from tests.running import fake_process
from tests.waiting import until

BODY = {"model": "gpt-x", "messages": [{"role": "user", "content": "ping pong"}]}


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=fake.base_url, timeout=30) as http:
        yield http


async def post(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    return await client.post("/chat/completions", json={**BODY, **extra})


async def stream_events(client: httpx.AsyncClient, **extra: Any) -> list[Any]:
    """POST with stream=true and return the decoded `data:` payloads ("[DONE]" kept as is)."""
    events: list[Any] = []
    body = {**BODY, "stream": True, **extra}
    async with client.stream("POST", "/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_models_lists_the_model(client: httpx.AsyncClient) -> None:
    response = await client.get("/models")
    assert response.json()["data"][0]["id"] == "fake-model"


async def test_default_reply_is_deterministic_echo(client: httpx.AsyncClient) -> None:
    body = (await post(client)).json()
    assert body["object"] == "chat.completion" and body["model"] == "gpt-x"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "echo: ping pong"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


async def test_echo_uses_last_user_message_and_text_parts(client: httpx.AsyncClient) -> None:
    messages = [
        {"role": "user", "content": "old"},
        {"role": "user", "content": [{"type": "text", "text": "new"}, {"type": "image_url"}]},
        {"role": "assistant", "content": "ignored"},
    ]
    body = (await post(client, messages=messages)).json()
    assert body["choices"][0]["message"]["content"] == "echo: new"


async def test_requests_are_recorded_with_headers(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    await client.post("/chat/completions", json=BODY, headers={"Authorization": "Bearer k"})
    [request] = fake.requests
    assert (request.path, request.json) == ("/v1/chat/completions", BODY)
    assert request.headers["authorization"] == "Bearer k"


async def test_script_queue_is_consumed_in_order(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    fake.script_reply("first")
    fake.fail_next(1, status=503)
    fake.script_reply("third")
    assert (await post(client)).json()["choices"][0]["message"]["content"] == "first"
    assert (await post(client)).status_code == 503
    assert (await post(client)).json()["choices"][0]["message"]["content"] == "third"
    assert (await post(client)).json()["choices"][0]["message"]["content"] == "echo: ping pong"


async def test_script_error_with_retry_after_and_body(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    fake.script_error(429, retry_after=7)
    fake.script_error(400, body="plain words")
    response = await post(client)
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["message"] == "scripted error 429"
    response = await post(client)
    assert (response.status_code, response.text) == (400, "plain words")


async def test_large_request_bodies_are_accepted(client: httpx.AsyncClient) -> None:
    text = "y" * 3_000_000
    body = (await post(client, messages=[{"role": "user", "content": text}])).json()
    assert body["choices"][0]["message"]["content"] == "echo: " + text


async def test_invalid_request_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/chat/completions", content=b"{nope")
    assert response.status_code == 400


async def test_tool_call_non_streaming(fake: FakeOpenAI, client: httpx.AsyncClient) -> None:
    fake.script_tool_call("lookup", {"q": "x"})
    choice = (await post(client)).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]


def agent_body(text: str, *extra: dict[str, Any]) -> dict[str, Any]:
    """An agent request: a system prompt, the user's text, tools offered."""
    return {"messages": [{"role": "system", "content": "you are kind"},
                         {"role": "user", "content": text}, *extra], "tools": TOOLS}


async def test_a_script_when_some_text_answers_only_that_chats_agent_requests(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    """Keyed scripts are taken by the agent requests whose input holds the key, in any order;
    a request without tools (a consolidation) or with other text gets the queue or the echo."""
    fake.script_tool_calls([("lookup", {"q": 1}, "c1"), ("lookup", {"q": 2}, None)],
                           when="alpha")
    fake.script_reply("alpha done", when="alpha")
    fake.script_reply("beta done", when="beta")
    fake.script_reply("unkeyed")

    def content(response: httpx.Response) -> Any:
        return response.json()["choices"][0]["message"]

    summary = {"messages": [{"role": "user", "content": "transcript: alpha, beta"}]}
    assert content(await client.post("/chat/completions", json=summary))["content"] == \
        "unkeyed"
    beta = await client.post("/chat/completions", json=agent_body("say beta"))
    assert content(beta)["content"] == "beta done"
    alpha = content(await client.post("/chat/completions", json=agent_body("run alpha")))
    assert [c["id"] for c in alpha["tool_calls"]][0] == "c1"
    assert [c["function"]["arguments"] for c in alpha["tool_calls"]] == ['{"q": 1}',
                                                                         '{"q": 2}']
    result = {"role": "tool", "tool_call_id": "c1", "content": "found"}
    follow_up = await client.post("/chat/completions", json=agent_body("run alpha", result))
    assert content(follow_up)["content"] == "alpha done"
    again = await client.post("/chat/completions", json=agent_body("run alpha"))
    assert content(again)["content"] == "echo: run alpha"


async def test_a_recital_repeats_the_system_prompt_and_tool_results(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    fake.script_recital(when="tell")
    result = {"role": "tool", "tool_call_id": "c1", "content": "file body"}
    response = await client.post("/chat/completions", json=agent_body("tell me", result))
    assert response.json()["choices"][0]["message"]["content"] == \
        "You asked: tell me\n\nI was told:\n\nyou are kind\n\nfile body"


async def test_streamed_reply_shape(fake: FakeOpenAI, client: httpx.AsyncClient) -> None:
    fake.script_reply("a b c")
    events = await stream_events(client, stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks, usage_chunk = events[:-2], events[-2]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    pieces = [d.get("content", "") for d in deltas]
    assert "".join(pieces) == "a b c" and len([p for p in pieces if p]) == 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 3


async def test_stream_without_include_usage_has_no_usage_chunk(
    client: httpx.AsyncClient,
) -> None:
    events = await stream_events(client)
    assert all(e == "[DONE]" or e["choices"] for e in events)


async def test_streamed_tool_call_shape(fake: FakeOpenAI, client: httpx.AsyncClient) -> None:
    fake.script_tool_call("lookup", {"query": "a longer argument"}, call_id="c1")
    events = await stream_events(client)
    fragments = [tc for e in events[:-1] for tc in e["choices"][0]["delta"].get("tool_calls", [])]
    assert fragments[0] == {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    assert len(fragments) > 2
    arguments = "".join(f["function"]["arguments"] for f in fragments)
    assert json.loads(arguments) == {"query": "a longer argument"}
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_garbage_and_drop(fake: FakeOpenAI, client: httpx.AsyncClient) -> None:
    fake.script_garbage()
    fake.script_drop()
    response = await post(client)
    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()
    with pytest.raises(httpx.RemoteProtocolError):
        await post(client)
    assert len(fake.requests) == 2


async def test_script_delay_applies_to_next_response_only(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    """The delayed request is still held while the one after it is answered."""
    fake.script_delay(600)
    held = asyncio.create_task(post(client))
    async with asyncio.timeout(30):
        await fake.wait_for_requests(1)
    answered = await post(client)
    assert answered.json()["choices"][0]["message"]["content"] == "echo: ping pong"
    assert not held.done()
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held


async def test_global_delay(fake: FakeOpenAI, client: httpx.AsyncClient) -> None:
    fake.delay_s = 0.1
    started = time.monotonic()
    await post(client)
    assert time.monotonic() - started >= 0.1


async def test_reset_forgets_script_and_requests(
    fake: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    fake.fail_next(3)
    fake.script_reply("kept?", when="ping")
    await post(client)
    fake.reset()
    assert fake.requests == []
    assert (await post(client)).status_code == 200
    response = await client.post("/chat/completions", json=agent_body("ping"))
    assert response.json()["choices"][0]["message"]["content"] == "echo: ping"


def test_thread_runner_serves_sync_clients() -> None:
    with FakeOpenAIThread(model="threaded") as fake:
        fake.script_reply("from thread")
        with httpx.Client(base_url=fake.base_url, timeout=5) as http:
            first = http.post("/chat/completions", json=BODY).json()
            second = http.post("/chat/completions", json=BODY).json()
            models = http.get("/models").json()
        assert first["choices"][0]["message"]["content"] == "from thread"
        assert second["choices"][0]["message"]["content"] == "echo: ping pong"
        assert models["data"][0]["id"] == "threaded"
        assert len(fake.wait_for_requests(2, timeout=30)) == 2
        with pytest.raises(TimeoutError):
            fake.wait_for_requests(3, timeout=0.01)


def test_standalone_process_prints_ready_and_serves() -> None:
    with fake_process("tests.fakes.openai_api") as base_url:
        response = httpx.post(f"{base_url}/chat/completions", json=BODY, timeout=5)
        assert response.json()["choices"][0]["message"]["content"] == "echo: ping pong"


async def test_a_client_hanging_up_is_recorded(fake: FakeOpenAI,
                                               client: httpx.AsyncClient) -> None:
    """A delayed answer and a slow stream, each abandoned by its client: both are marked
    hung_up; an answer read to the end is not."""
    await post(client)
    fake.script_delay(600)  # with the reply after it: the second request's answer
    fake.script_reply("slow")
    fake.script_reply("one two three", chunk_delay_s=600)  # the stream's
    waiting = asyncio.create_task(post(client))
    async with asyncio.timeout(30):
        await fake.wait_for_requests(2)
    waiting.cancel()
    async with client.stream("POST", "/chat/completions",
                             json={**BODY, "stream": True}) as response:
        async for line in response.aiter_lines():
            if '"one ' in line:
                break  # leave mid-stream
    await until(lambda: len(fake.requests) == 3 and all(r.hung_up for r in fake.requests[1:]),
                timeout=30)
    assert not fake.requests[0].hung_up


def test_the_thread_runner_waits_for_a_hang_up() -> None:
    with FakeOpenAIThread() as fake:
        fake.script_delay(600)
        with httpx.Client(base_url=fake.base_url, timeout=0.5) as http, \
                pytest.raises(httpx.ReadTimeout):
            http.post("/chat/completions", json=BODY)
        assert fake.wait_hung_up(0).hung_up
