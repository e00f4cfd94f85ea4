"""The message and request_file tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soulflow.agent.tools.base import ChatRef, ToolContext, ToolServices
from soulflow.agent.tools.messaging import UPLOAD_PROMPT, MessageTool, RequestFileTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.contracts import OutboundMessage


class Outbox:
    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []

    async def __call__(self, message: OutboundMessage) -> None:
        self.sent.append(message)


def make(workspace: Path, *, outbox: Outbox | None = None, approved: bool = False,
         request_file: Any = None) -> tuple[ToolRegistry, ToolContext]:
    registry = ToolRegistry()
    registry.register(MessageTool())
    registry.register(RequestFileTool())
    services = ToolServices(send_message=outbox, request_file=request_file)
    ctx = ToolContext(workspace, ChatRef("slack", "C1", "171.5", "U1"), approved=approved,
                      services=services)
    return registry, ctx


async def test_message_to_the_current_chat_keeps_its_thread(workspace: Path) -> None:
    outbox = Outbox()
    registry, ctx = make(workspace, outbox=outbox)
    result = await registry.execute("message", {"text": "halfway there"}, ctx)
    assert result.status == "ok"
    [sent] = outbox.sent
    assert (sent.provider, sent.chat_id, sent.thread_id, sent.content) == (
        "slack", "C1", "171.5", "halfway there")
    assert result.output == f"message queued for this chat (id {sent.message_id})"
    explicit = {"text": "again", "chat": {"provider": "slack", "chat_id": "C1"}}
    assert (await registry.execute("message", explicit, ctx)).status == "ok"
    assert outbox.sent[-1].thread_id == "171.5"


async def test_message_to_another_chat_needs_approval(workspace: Path) -> None:
    outbox = Outbox()
    registry, ctx = make(workspace, outbox=outbox)
    params = {"text": "hello", "chat": {"provider": "telegram", "chat_id": 42}}
    result = await registry.execute("message", params, ctx)
    assert result.status == "approval_required"
    assert result.reason == "sends to another chat (telegram:42)"
    assert outbox.sent == []
    registry, approved = make(workspace, outbox=outbox, approved=True)
    result = await registry.execute("message", params, approved)
    assert result.status == "ok" and result.output.startswith("message queued for telegram:42")
    [sent] = outbox.sent
    assert (sent.provider, sent.chat_id, sent.thread_id) == ("telegram", "42", None)


async def test_another_thread_of_the_same_chat_needs_no_approval(workspace: Path) -> None:
    outbox = Outbox()
    registry, ctx = make(workspace, outbox=outbox)
    params = {"text": "fyi", "chat": {"provider": "slack", "chat_id": "C1", "thread_id": "9.1"}}
    assert (await registry.execute("message", params, ctx)).status == "ok"
    assert outbox.sent[0].thread_id == "9.1"


async def test_message_errors(workspace: Path) -> None:
    registry, ctx = make(workspace)
    result = await registry.execute("message", {"text": "x"}, ctx)
    assert result.output == "Error: the message service is not available here"
    result = await registry.execute("message", {"text": ""}, ctx)
    assert result.status == "error" and "should be non-empty" in result.output


def test_request_file_is_a_question_for_the_loop() -> None:
    tool = RequestFileTool()
    assert tool.asks_user is True
    assert tool.question({"description": "The Q3 invoice as PDF."}) == (
        f"The Q3 invoice as PDF.\n\n{UPLOAD_PROMPT}")
    assert tool.question({}).endswith(UPLOAD_PROMPT)
    assert not tool.idempotent


async def test_request_file_fallback_without_service(workspace: Path) -> None:
    registry, ctx = make(workspace)
    result = await registry.execute("request_file", {"description": "your CV"}, ctx)
    assert result.status == "ok"
    assert "Call request_more_information now" in result.output
    assert result.output.endswith(f"your CV\n\n{UPLOAD_PROMPT}")


async def test_request_file_fallback_with_service(workspace: Path) -> None:
    asked: list[str] = []

    async def request_file(description: str) -> None:
        asked.append(description)

    registry, ctx = make(workspace, request_file=request_file)
    result = await registry.execute("request_file", {"description": "your CV"}, ctx)
    assert asked == ["your CV"]
    assert result.status == "ok" and "request_more_information" in result.output
    assert "[attachment NAME saved at PATH]" in result.output
