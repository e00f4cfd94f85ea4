"""Commands that work on every channel, answered without the model.

`/stop` `/cancel` `/중지` abort the chat's active runs; `/help` lists commands. Capabilities
that are not wired into this daemon yet answer so plainly instead of pretending.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage

CommandHandler = Callable[[Command, InboundMessage], Awaitable[str]]

STOP_NAMES = frozenset({"stop", "cancel", "중지"})

HELP_LINES = {
    "stop": "/stop (also /cancel, /중지): stop what I am doing in this chat",
    "help": "/help: this list",
    "render": "/render <mermaid>: draw a diagram",
    "secret": "/secret list | set NAME | rm NAME: manage stored secrets (values never shown)",
    "cron": "/cron list | rm ID: this chat's scheduled jobs (ask me in words to add one)",
    "task": "/task REQUEST (plan and run a multi-step task) | list | show ID | cancel ID",
    "repl": "/repl <python>: run Python in a sandbox",
}


@dataclass(frozen=True)
class CommandRouter:
    """Maps command names to handlers, all given when it is built (the runtime passes those
    backed by its services: /secret, /repl, /render, /cron, /task); a known command without
    one says it is unavailable."""

    stop_chat: Callable[[str], Awaitable[int]]  # the chat's runs and tasks; how many ran
    handlers: Mapping[str, CommandHandler] = field(default_factory=dict)

    async def stop(self, chat_key: str) -> str:
        """Abort the chat's active runs and tasks; the reply says how many were running."""
        stopped = await self.stop_chat(chat_key)
        return f"Stopped {stopped} running task(s)." if stopped else \
            "Nothing is running in this chat."

    def help_text(self) -> str:
        lines = [HELP_LINES[name] for name in HELP_LINES]
        return "Commands:\n" + "\n".join(f"• {line}" for line in lines) + \
            "\nAnything else is sent to the agent."

    async def handle(self, command: Command, message: InboundMessage) -> str:
        name = command.name
        if name in STOP_NAMES:
            return await self.stop(message.chat_key)
        if name == "help":
            return self.help_text()
        handler = self.handlers.get(name)
        if handler is not None:
            return await handler(command, message)
        if name in HELP_LINES:
            return (f"/{name} is not available in this SoulFlow daemon yet; the capability "
                    "behind it is not installed.")
        return f"I don't know the command /{name}.\n\n{self.help_text()}"
