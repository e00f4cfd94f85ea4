"""Chat tools: ``message`` (send a message now) and ``request_file`` (ask the user for a file).

``message`` goes through ``ctx.services.send_message`` and so through the outbox like every
reply. Posting in the current chat is routine (the model already answers there); posting in
another chat could leak this conversation to other people, so it needs the user's approval.
A chat is identified by provider and chat id; a different thread of the same chat reaches
the same people and needs no approval.

``request_file`` pauses the run until the user answers, exactly like the loop's
``request_more_information`` intent. It writes nothing itself: the conversation saves the
user's attachments in the chat's own zone, ``chats/<zone>/files/``, and puts
``[attachment NAME saved at PATH]`` lines in the reply text, PATH relative to the workspace,
so the model gets paths its file tools and ``exec`` can read (and other chats cannot).
Neither tool sends a workspace file: ``message`` sends text only, so it cannot carry another
chat's files or the daemon's out of the workspace. The loop recognises the tool by
its ``asks_user`` attribute and asks `RequestFileTool.question` instead of running it (see
the loop patch in the runtime notes); `RequestFileTool.run` is only the fallback for a loop
without that patch, and tells the model to wait with ``request_more_information`` itself.
"""

from __future__ import annotations

from typing import Any

from soulflow import tracing
from soulflow.agent.tools.base import ChatRef, Params, Tool, ToolContext
from soulflow.contracts import OutboundMessage

__all__ = ["UPLOAD_PROMPT", "MessageTool", "RequestFileTool"]

MAX_MESSAGE_CHARS = 20_000
UPLOAD_PROMPT = "Please upload the file here."
_WAIT_INTENT = "request_more_information"


def _target(params: Params, ctx: ToolContext) -> ChatRef:
    """Where the message goes: ``params['chat']`` or the current chat (and its thread)."""
    current = ctx.chat
    chat = params.get("chat")
    if not chat:
        return ChatRef(current.provider, current.chat_id, current.thread_id)
    provider, chat_id = str(chat["provider"]), str(chat["chat_id"])
    thread_id = chat.get("thread_id")
    if _same_chat(provider, chat_id, current) and "thread_id" not in chat:
        thread_id = current.thread_id  # "this chat" keeps the conversation's thread
    return ChatRef(provider, chat_id, None if thread_id is None else str(thread_id))


def _same_chat(provider: str, chat_id: str, current: ChatRef) -> bool:
    return (provider, chat_id) == (current.provider, current.chat_id)


class MessageTool(Tool):
    name = "message"
    description = (
        "Send a message to a chat right away, e.g. a progress update during a long task. "
        "Without `chat` it goes to the current chat; sending to another chat needs the "
        "user's approval. Your final answer is sent anyway: don't repeat it with this tool."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS},
            "chat": {
                "type": "object",
                "description": "Another chat; omit for the current one.",
                "properties": {
                    "provider": {"type": "string", "minLength": 1,
                                 "description": "slack, telegram, discord or local"},
                    "chat_id": {"type": ["string", "integer"], "minLength": 1},
                    "thread_id": {"type": ["string", "integer", "null"]},
                },
                "required": ["provider", "chat_id"],
                "additionalProperties": False,
            },
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    idempotent = False
    timeout_s = 30

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        target = _target(params, ctx)
        if _same_chat(target.provider, target.chat_id, ctx.chat):
            return None
        return f"sends to another chat ({target.provider}:{target.chat_id})"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        send = ctx.services.require("send_message")
        target = _target(params, ctx)
        message = OutboundMessage(
            provider=target.provider, chat_id=target.chat_id, content=params["text"],
            thread_id=target.thread_id, from_chat=f"{ctx.chat.provider}:{ctx.chat.chat_id}",
            trace=tracing.traceparent())  # its delivery joins the run's trace
        await send(message)
        where = "this chat" if _same_chat(target.provider, target.chat_id, ctx.chat) else \
            f"{target.provider}:{target.chat_id}"
        return f"message queued for {where} (id {message.message_id})"


class RequestFileTool(Tool):
    """Ask the user to upload a file and wait for it (see the module docstring)."""

    name = "request_file"
    description = (
        "Ask the user to upload a file in this chat and wait for it. Describe which file "
        "you need and why. The run pauses until the user replies; their reply contains "
        "`[attachment NAME saved at PATH]` for each uploaded file, PATH relative to the "
        "workspace (in this chat's folder), which you can read."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 1, "maxLength": 2000,
                            "description": "Which file you need, shown to the user."},
        },
        "required": ["description"],
        "additionalProperties": False,
    }
    idempotent = False
    timeout_s = 30
    asks_user = True
    """The loop turns a call into a question (`question`) and waits, like
    request_more_information; nobody answers inside a sub-agent, which then fails clearly."""

    def question(self, params: Params) -> str:
        """The text the user sees; the loop records it as the run's open question."""
        description = str(params.get("description") or "").strip() or \
            "I need a file to continue."
        return f"{description}\n\n{UPLOAD_PROMPT}"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        """Fallback when the loop does not treat this tool as a question by itself."""
        question = self.question(params)
        request = ctx.services.request_file
        if request is None:
            return (f"The request was not sent yet. Call {_WAIT_INTENT} now with this "
                    f"question, word for word, to ask the user and wait for the upload:\n"
                    f"{question}")
        await request(params["description"])
        return (f"The user was asked to upload the file. Now call {_WAIT_INTENT} with the "
                "question \"I'll continue once the file is here.\" to wait for it; the "
                "answer will contain `[attachment NAME saved at PATH]` for each file.")
