"""What the conversation asks of a chat's task graphs, given to it when it is built.

A reply may answer a task (its plan under review, a step waiting for an answer), a reaction
may decide a task's prompt, and /stop (or a stop reaction) stops a chat's tasks with its runs.
The task graphs sit above the conversation in the layers, so the conversation names only this
protocol; `soulflow.tasks.wiring.TaskServices` implements it, and the runtime builds the
task services first and hands them to the conversation.
"""

from __future__ import annotations

from typing import Protocol

from soulflow.contracts import InboundMessage


class ChatTasks(Protocol):
    async def answer_reply(self, message: InboundMessage) -> str | None:
        """The answer when `message` is meant for one of its chat's tasks; None: it is not."""
        ...

    async def answer_reaction(self, message: InboundMessage) -> str | None:
        """What a reaction on a task's prompt decided; None: it is not on one (or there is
        nothing to say)."""
        ...

    async def stop_chat(self, chat_key: str) -> int:
        """Cancel the chat's running tasks; how many there were (read off the event loop)."""
        ...
