"""AgentDomain: turn one inbound message into one reply, keeping the session on disk.

For now a reply is a single model turn; tools, approvals and the event-thread loop plug in
here later without the channel side changing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from soulflow.agent.context import ContextBuilder
from soulflow.bus.messages import InboundMessage
from soulflow.providers.base import ProviderError
from soulflow.providers.registry import ProviderRegistry
from soulflow.session.store import SessionStore

log = logging.getLogger(__name__)

NOT_CONFIGURED_REPLY = (
    "No model provider is configured yet, so I can't answer: set PROVIDER=openrouter with "
    "OPENROUTER_API_KEY, or PROVIDER=phi4_local with PHI4_BASE_URL, in the workspace's .env "
    "and restart (see docs/config.md)."
)


@dataclass(slots=True)
class AgentReply:
    content: str
    status: str  # answered | failed
    error: str | None = None


def session_key_for(message: InboundMessage) -> str:
    """One session per chat, and per thread where the platform has threads."""
    base = message.chat_key
    return f"{base}:{message.thread_id}" if message.thread_id else base


class AgentDomain:
    def __init__(self, context: ContextBuilder, sessions: SessionStore,
                 providers: ProviderRegistry | None) -> None:
        self.context = context
        self.sessions = sessions
        self.providers = providers

    @property
    def provider_name(self) -> str | None:
        if self.providers is None or not self.providers.names():
            return None
        return self.providers.default_name

    async def respond(self, message: InboundMessage, text: str, *,
                      abort: asyncio.Event | None = None) -> AgentReply:
        """Answer `text` (the message's text after sealing/truncation) and record both turns."""
        key = session_key_for(message)
        self._record_user_turn(key, message, text)
        if self.provider_name is None or self.providers is None:
            return self._finish(key, message, AgentReply(NOT_CONFIGURED_REPLY, "answered"))
        provider = self.providers.get(self.provider_name)
        try:
            result = await provider.chat(self.context.build(key, text), abort=abort)
        except ProviderError as exc:
            if exc.kind == "aborted":
                return self._finish(key, message, AgentReply("Stopped.", "cancelled"))
            log.warning("provider failed for %s: %s", message.key, exc)
            reply = AgentReply(
                f"Sorry, I couldn't get an answer from the model ({exc.kind}). Your message "
                "is saved in the session; send it again when the provider is back.",
                "failed", str(exc))
            return self._finish(key, message, reply)
        content = result.content.strip() or "(the model returned an empty answer)"
        return self._finish(key, message, AgentReply(content, "answered"),
                            extra={"provider": result.provider, "model": result.model})

    def _record_user_turn(self, key: str, message: InboundMessage, text: str) -> None:
        """Append the user's turn unless a resumed run already did (crash before the reply)."""
        recent = self.sessions.last(key, 5)
        if any(r.get("inbound_key") == message.key and r.get("role") == "user" for r in recent):
            return
        self.sessions.append(key, {"role": "user", "content": text, "inbound_key": message.key,
                                   "sender_id": message.sender_id})

    def _finish(self, key: str, message: InboundMessage, reply: AgentReply,
                extra: dict[str, Any] | None = None) -> AgentReply:
        record: dict[str, Any] = {"role": "assistant", "content": reply.content,
                                  "inbound_key": message.key, "status": reply.status}
        if reply.error:
            record["error"] = reply.error
        record.update(extra or {})
        self.sessions.append(key, record)
        return reply
