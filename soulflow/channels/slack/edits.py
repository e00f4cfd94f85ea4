"""A reply that replaces the text of a message the bot posted (a streamed reply's pieces and
final text, `ReplyOptions.edit_of`): `chat.update` on the reply client.

Not the feedback client the adapter's best-effort `edit` uses (a task's status message): the
dispatcher retries this call and paces it with the chat's sends. An edit is idempotent, so it
needs no look-up before a retry.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from soulflow.channels.slack.format import (
    CANNOT_UPDATE,
    api_send_error,
    error_code,
    markdown_to_mrkdwn,
    valid_ts,
)
from soulflow.channels.slack.inbound import NETWORK_ERRORS
from soulflow.contracts import OutboundMessage, SendError

log = logging.getLogger(__name__)


async def update_reply(web: AsyncWebClient, message: OutboundMessage) -> bool:
    """Put the message's text (mrkdwn, as a post has it) into the message `edit_of`. False
    when that message is gone (a user deleted it) or can no longer be updated: the caller
    posts the text as a new message then, so the final text of a reply is never lost to an
    edit. Failures come back as classified `SendError`s, as a post's do."""
    edit_of = message.options.edit_of
    if message.options.as_file:
        raise SendError("a reply sent as a file cannot edit a message", permanent=True)
    if valid_ts({"ts": edit_of}) is None:
        raise SendError(f"{edit_of[:40]!r} is not a Slack message ts", permanent=True)
    if not message.content.strip():
        raise SendError("Slack does not accept an empty message", permanent=True)
    try:
        await web.chat_update(channel=message.chat_id, ts=edit_of,
                              text=markdown_to_mrkdwn(message.content))
    except SlackApiError as exc:
        code = error_code(exc)
        if code not in CANNOT_UPDATE:
            raise api_send_error(exc) from None
        log.info("slack: cannot update message %s in %s (%s); posting the text as a new "
                 "message", edit_of, message.chat_id, code)
        return False
    except SlackClientError as exc:
        raise SendError(f"Slack client refused the request: {exc}", permanent=True) from None
    except NETWORK_ERRORS as exc:
        raise SendError(f"network error talking to Slack: {type(exc).__name__}: {exc}"
                        ) from None
    return True
