"""Exactly once on Slack: find a reply Slack may already have before sending it again.

chat.postMessage has no idempotency key, but a message can carry app metadata, which
conversations.history/replies return with `include_all_metadata=true`. So every reply is
posted with `{"event_type": "soulflow_reply", "event_payload": {"id": <outbox id>}}` (the id
only: metadata is readable by every app in the workspace), and a send that may have reached
Slack reads the channel (or the thread) for that id first. "May have": the outbox marked the
send in flight and the process died before it reported back (read after a restart or a
takeover: `Delivery.maybe_sent`), or an earlier try in this process ended without an answer
(a timeout, a broken connection) or its look-up failed. An ordinary send reads nothing.

Not covered: a reply sent as a file (files.uploadV2 takes no metadata) is sent again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from soulflow.channels.slack.format import api_send_error
from soulflow.channels.slack.inbound import NETWORK_ERRORS
from soulflow.contracts import OutboundMessage, SendError

log = logging.getLogger(__name__)

REPLY_EVENT = "soulflow_reply"
# The look-up reads from the record's creation time minus this (the node's clock against
# Slack's ts), at most LOOKUP_PAGES pages of LOOKUP_PAGE messages.
LOOKUP_MARGIN_S = 10.0
LOOKUP_PAGE = 200
LOOKUP_PAGES = 10
UNSURE_KEPT = 1000  # ids whose last try may have reached Slack, remembered in this process


def reply_metadata(message_id: str) -> dict[str, Any]:
    """The metadata every reply is posted with."""
    return {"event_type": REPLY_EVENT, "event_payload": {"id": message_id}}


def is_tagged(message: Any, message_id: str, bot_user_id: str) -> bool:
    """A post of this bot carrying this reply id (users cannot post app metadata, and the
    author check keeps another app's tag from counting)."""
    if not isinstance(message, dict) or not message.get("ts"):
        return False
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != REPLY_EVENT:
        return False
    payload = metadata.get("event_payload")
    return (isinstance(payload, dict) and payload.get("id") == message_id
            and message.get("user") == bot_user_id)


class ResendGuard:
    """Decides whether a send must look first, and looks."""

    def __init__(self, api: Callable[[], AsyncWebClient], bot_user_id: Callable[[], str]
                 ) -> None:
        self._api = api
        self._bot_user_id = bot_user_id
        self._unsure: OrderedDict[str, None] = OrderedDict()

    def unsure(self, message_id: str) -> None:
        """The last try of this reply may have reached Slack: the next one looks first."""
        self._unsure[message_id] = None
        self._unsure.move_to_end(message_id)
        while len(self._unsure) > UNSURE_KEPT:
            self._unsure.popitem(last=False)

    def settled(self, message_id: str) -> None:
        self._unsure.pop(message_id, None)

    def must_look(self, message: OutboundMessage) -> bool:
        if message.options.as_file:
            return False  # no metadata on uploads: nothing to find
        return message.delivery.maybe_sent or message.message_id in self._unsure

    async def posted_before(self, message: OutboundMessage, thread_ts: str | None
                            ) -> list[str]:
        """The ts of the earlier posts of this reply, oldest first; empty when it must be
        sent. A look-up Slack refuses for good (a missing history scope, say) is logged and
        the reply sent (a duplicate is better than a lost reply); a transient failure (rate
        limit, network) raises SendError to retry later, still looking first then."""
        if not self.must_look(message):
            return []
        if not self._bot_user_id():  # whose posts to look for is not known yet
            raise SendError("the Slack channel is not started")
        try:
            found = await self._tagged_posts(message, thread_ts)
        except SlackApiError as exc:
            error = api_send_error(exc)
            if not error.permanent:
                self.unsure(message.message_id)
                raise error from None
            log.warning("slack: cannot look for %s in %s before sending it again (%s); "
                        "sending it (it may show twice)", message.message_id, message.chat_id,
                        error)
            return []
        except NETWORK_ERRORS as exc:
            self.unsure(message.message_id)
            raise SendError(f"network error looking for an earlier send: "
                            f"{type(exc).__name__}: {exc}") from None
        if found:
            log.info("slack: %s was delivered before (the answer was lost); not sending it "
                     "again", message.message_id)
            self.settled(message.message_id)
        return found

    async def _tagged_posts(self, message: OutboundMessage, thread_ts: str | None
                            ) -> list[str]:
        oldest = f"{max(0.0, message.created_at - LOOKUP_MARGIN_S):.6f}"
        api, bot, cursor, found = self._api(), self._bot_user_id(), None, []
        for _ in range(LOOKUP_PAGES):
            if thread_ts:
                reply = await api.conversations_replies(
                    channel=message.chat_id, ts=thread_ts, oldest=oldest, limit=LOOKUP_PAGE,
                    include_all_metadata=True, cursor=cursor)
            else:
                reply = await api.conversations_history(
                    channel=message.chat_id, oldest=oldest, limit=LOOKUP_PAGE,
                    include_all_metadata=True, cursor=cursor)
            found += [str(m["ts"]) for m in reply.get("messages") or []
                      if is_tagged(m, message.message_id, bot)]
            cursor = (reply.get("response_metadata") or {}).get("next_cursor")
            if found or not cursor:  # found: no more calls (parts of one reply are adjacent)
                break
        return sorted(set(found), key=float)
