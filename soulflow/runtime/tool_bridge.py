"""What a tool call may reach of the daemon, bound to the chat of the run that makes it.

Tools get these as `ToolServices` callables (see `soulflow.agent.tools.base`), never the
runtime itself: a message through the outbox, the upload prompt of `request_file`, a
sub-agent run, the cron scheduler (another chat only when an admin asked). The bridge is
built from exactly those parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.run.reducer import RunState
from soulflow.agent.tools.base import ToolContext, ToolError, ToolServices
from soulflow.agent.tools.messaging import UPLOAD_PROMPT
from soulflow.agent.tools.spawn import run_subagent
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import ChatRef, OutboundMessage
from soulflow.conversation.replies import BusReplies
from soulflow.cron import CronService
from soulflow.cron.admin import ToolCronHandle
from soulflow.security.vault import SecretVault


@dataclass(frozen=True, slots=True)
class ToolBridge:
    """Builds each tool call's `ToolContext` with services bound to the run's chat.

    `main_loop` is the daemon's agent loop, where `spawn` starts sub-runs. It is asked for
    at the call, not given: that loop is built with this bridge's `context` (its tools run
    through it), so the bridge exists first; by the time a tool calls `spawn` the loop does.
    """

    workspace: Path
    vault: SecretVault | None
    channels: ChannelRegistry
    replies: BusReplies  # every text to a chat goes through `publish_to_chat` (split, stored)
    redact: Callable[[str], str]
    is_admin: Callable[[str, str], bool]  # (provider, user id): may name another chat
    cron: CronService
    main_loop: Callable[[], AgentLoop | None]

    def context(self, state: RunState, approved: bool) -> ToolContext:
        chat = state.chat
        services = ToolServices(
            send_message=self._send,
            request_file=partial(self._request_file, chat),
            # a sub-run gets no spawn service: sub-agents cannot start sub-agents
            spawn=None if state.parent_run else partial(self._spawn, chat, state.run_id),
            schedule=partial(self._cron, chat))
        # the session and origin name the run's chat zone (a quiet heartbeat turn has a
        # folder of its own, `zone_for`): the file tools and the sandbox work in it
        return ToolContext(workspace=self.workspace,
                           chat=ChatRef(chat.provider, chat.chat_id, chat.thread_id,
                                        chat.sender_id, session_key=chat.session_key,
                                        origin=chat.origin),
                           approved=approved, vault=self.vault, services=services)

    async def _send(self, message: OutboundMessage) -> None:
        if self.channels.get(message.provider) is None:
            raise ToolError(f"there is no {message.provider!r} channel in this daemon "
                            f"(configured: {', '.join(self.channels.names())})")
        chat = ChatRef(message.provider, message.chat_id, message.thread_id)
        await self.replies.publish_to_chat(  # split per platform limits, stored
            chat, self.redact(message.content), reply_to=message.reply_to,
            from_chat=message.from_chat)

    async def _request_file(self, chat: ChatRef, description: str) -> None:
        """Fallback path of request_file (used only if the loop does not intercept it)."""
        await self.replies.publish_to_chat(  # split per platform limits, stored
            ChatRef(chat.provider, chat.chat_id, chat.thread_id),
            f"{description}\n\n{UPLOAD_PROMPT}")

    async def _spawn(self, chat: ChatRef, parent_run: str, task: str, max_turns: int) -> str:
        loop = self.main_loop()
        if loop is None:  # tools only run inside a loop; kept for type safety
            raise ToolError("no model provider is configured")
        return await run_subagent(loop, parent_chat=chat, task=task, max_turns=max_turns,
                                  parent_run=parent_run)

    async def _cron(self, chat: ChatRef) -> ToolCronHandle:
        """The scheduler for one run: another chat may be named only if an admin asked."""
        admin = self.is_admin(chat.provider, chat.requester_id)
        return ToolCronHandle(self.cron, admin, self.channels.names())
