"""The `task` tool: the model hands multi-step work to the planner instead of doing it in one run.

Simple requests stay plain agent runs; the model calls `task` only for work that needs several
steps, approvals along the way or hours of time. The tool runs the same path as `/task
<request>` (chat.py) in the chat of the run that called it, with that run's requester as the
task's requester, posts the outcome (the started task, or the plan to review) in the chat
itself, and tells the model what was posted so it does not repeat it.
"""

from __future__ import annotations

from collections.abc import Callable

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.contracts import ChatRef
from soulflow.tasks.chat import Asker, TaskChat
from soulflow.tasks.executors import TASK_TOOL

PublishFn = Callable[[ChatRef, str], None]


class TaskTool(Tool):
    name = TASK_TOOL
    description = (
        "Plan and run multi-step work as a background task: several steps (research, compare, "
        "draft, send), approvals along the way, or work taking long. The plan runs step by step "
        "with progress posted in this chat; risky plans are shown to the user first. Do NOT "
        "use it for a simple question or a single action: answer or act directly.")
    parameters = {
        "type": "object",
        "properties": {"request": {"type": "string", "minLength": 1,
                                   "description": "the whole request, in the user's words"}},
        "required": ["request"],
        "additionalProperties": False,
    }
    timeout_s = 300  # planning is a model call, possibly retried once

    def __init__(self, chat: Callable[[], TaskChat | None], publish: PublishFn) -> None:
        self._chat = chat
        self._publish = publish

    async def run(self, params: Params, ctx: ToolContext) -> str:
        chat = self._chat()
        if chat is None:
            raise ToolError("tasks are not available in this daemon")
        asker = Asker(ctx.chat.provider, ctx.chat.chat_id, ctx.chat.thread_id,
                      ctx.chat.sender_id)
        text = await chat.start(asker, str(params["request"]))
        self._publish(ChatRef(asker.provider, asker.chat_id, asker.thread_id), text)
        return ("Posted in the chat (do not repeat it; at most add one short sentence):\n"
                + text)

