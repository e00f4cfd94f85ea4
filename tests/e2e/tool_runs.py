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


def run_tools(live: Live, chat: str, calls: Sequence[ToolCall], *, user: str | None = None,
              recite: bool = False, timeout: float = 60.0) -> ToolRun:
    """`user` writes in `chat`; the model calls `calls` in one turn, then answers "done
    <key>" or, with `recite`, repeats to the chat everything it was given (system prompt,
    tool results). Returns once the answer is posted and the outbox is empty."""
    key = f"run{uuid.uuid4().hex[:10]}"
    ids = [f"{key}.{index:03d}" for index in range(len(calls))]
    live.llm.script_tool_calls([(name, arguments, call_id)
                                for (name, arguments), call_id in zip(calls, ids, strict=True)],
                               when=key)
    if recite:
        live.llm.script_recital(when=key)
    else:
        live.llm.script_reply(f"done {key}", when=key)
    known = {post.id for post in live.posts(chat)}
    live.driver.post(f"please {key}", chat=chat, user=user)
    live.wait(lambda: any(key in post.text for post in live.posts(chat) if post.id not in known),
              f"the answer of {key} in {chat}", timeout)
    live.settle()
    requests = live.llm.requests
    outputs = [tool_output(requests, call_id) for call_id in ids]
    return ToolRun(key, list(calls), outputs,
                   [post for post in live.posts(chat) if post.id not in known])
