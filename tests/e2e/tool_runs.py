"""Scripted tool runs through a running daemon, for the trust-zone tests: a person writes in a
chat, the fake model answers that run (and only that run, `when=`) with one turn calling
several tools, then with a closing reply (or a recital of all it was given); the test gets
what each tool returned, as the model saw it, and what the bot posted in the chat.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.platform_helpers import BotPost
from tests.e2e.test_platforms import Live
from tests.fakes.openai_api import RecordedRequest

ToolCall = tuple[str, dict[str, Any]]  # (tool name, arguments)


def require_bwrap() -> None:
    """`exec` runs sandboxed only with bubblewrap (else every call waits for an admin)."""
    if shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap (bwrap) is not installed")
        pytest.skip("bubblewrap (bwrap) is not installed")


def tool_output(requests: list[RecordedRequest], call_id: str) -> str:
    """What the tool call `call_id` returned, as the model was shown it."""
    for request in requests:
        for message in request.json["messages"]:
            if message.get("role") == "tool" and str(message.get("tool_call_id")).endswith(
                    call_id):  # the loop prefixes the model's id with its turn
                return str(message["content"])
    raise AssertionError(f"no result of {call_id} reached the model")


@dataclass(frozen=True)
class ToolRun:
    """One scripted run: the calls made, what each returned, and the bot's posts."""

    key: str
    calls: list[ToolCall]
    outputs: list[str]  # in the order of `calls`
    posts: list[BotPost]

    def said(self) -> str:
        """Everything the bot posted in the chat for this run, files included."""
        parts = []
        for post in self.posts:
            parts.append(post.text)
            if post.file is not None:
                parts.append(post.file[1].decode("utf-8", "replace"))
        return "\n".join(parts)

    def results(self) -> list[tuple[ToolCall, str]]:
        return list(zip(self.calls, self.outputs, strict=True))


@dataclass(frozen=True)
class StartedRun:
    """A scripted run asked for and not yet awaited (several may run at once)."""

    live: Live
    chat: str
    key: str
    calls: list[ToolCall]
    known: frozenset[str]  # the chat's posts before it

    def finish(self, timeout: float = 60.0) -> ToolRun:
        """Wait for the run's answer and an empty outbox; what the tools returned."""
        live, chat, key = self.live, self.chat, self.key
        live.wait(lambda: any(key in post.text for post in live.posts(chat)
                              if post.id not in self.known),
                  f"the answer of {key} in {chat}", timeout)
        live.settle()
        requests = live.llm.requests
        outputs = [tool_output(requests, f"{key}.{index:03d}")
                   for index in range(len(self.calls))]
        return ToolRun(key, self.calls, outputs,
                       [post for post in live.posts(chat) if post.id not in self.known])


def start_tools(live: Live, chat: str, calls: Sequence[ToolCall], *, user: str | None = None,
                recite: bool = False) -> StartedRun:
    """`user` writes in `chat`; the model will call `calls` in one turn, then answer "done
    <key>" or, with `recite`, repeat to the chat everything it was given (system prompt,
    tool results)."""
    key = f"run{uuid.uuid4().hex[:10]}"
    ids = [f"{key}.{index:03d}" for index in range(len(calls))]
    live.llm.script_tool_calls([(name, arguments, call_id)
                                for (name, arguments), call_id in zip(calls, ids, strict=True)],
                               when=key)
    if recite:
        live.llm.script_recital(when=key)
    else:
        live.llm.script_reply(f"done {key}", when=key)
    known = frozenset(post.id for post in live.posts(chat))
    live.driver.post(f"please {key}", chat=chat, user=user)
    return StartedRun(live, chat, key, list(calls), known)


def run_tools(live: Live, chat: str, calls: Sequence[ToolCall], *, user: str | None = None,
              recite: bool = False, timeout: float = 60.0) -> ToolRun:
    """`start_tools`, then wait for it to finish."""
    return start_tools(live, chat, calls, user=user, recite=recite).finish(timeout)


def fresh_prompt(live: Live, chat: str, user: str | None, controls: Sequence[str]) -> str:
    """The system prompt of a request made for `user` in `chat` once every one of
    `controls` (text the operator just wrote into prompt files) shows in it: whatever was
    on disk before is in it by then, so what is absent was not loaded."""
    asked = [0]

    def fresh() -> str | None:
        asked[0] += 1
        text = f"what do you know {asked[0]} {uuid.uuid4().hex[:8]}"
        live.driver.post(text, user=user, chat=chat)
        live.wait_post(f"echo: {text}", chat)
        prompts = [str(request.json["messages"][0]["content"])
                   for request in live.llm.requests if request.json.get("tools")
                   and _last_user_text(request.json["messages"]).endswith(text)]
        if prompts and all(control in prompts[-1] for control in controls):
            return prompts[-1]
        return None
    return live.wait(fresh, f"a fresh system prompt in {chat}", 30)


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    return str(last["content"]) if last is not None else ""
