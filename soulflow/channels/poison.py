"""What an adapter puts in its batch for a platform update it could not read.

Dropping such an update silently would lose a message; raising would wedge the channel on
it. So the adapter returns `poison_message(...)` in its place, and the conversation's intake
quarantines it (inbound DLQ, id marked seen: `soulflow.conversation.quarantine`) before the
adapter's cursor moves past it.
"""

from __future__ import annotations

import json
from typing import Any

from soulflow.contracts import InboundMessage, Poison
from soulflow.security.dead_letters import RAW_CAP

POISON_KIND = "poison"


def poison_message(provider: str, *, message_id: str, error: BaseException | str,
                   raw: Any = None, chat_id: str = "?", sender_id: str = "?") -> InboundMessage:
    """What an adapter puts in its batch for an update it could not read.

    `message_id` must be stable for that update (e.g. `update-<update_id>`), so a redelivery
    is recognised as seen; `raw` is the update as received (cut and redacted when recorded).
    """
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    try:
        excerpt = json.dumps(raw, ensure_ascii=True, default=repr)[:RAW_CAP]
    except (TypeError, ValueError):  # a recursive or odd object
        excerpt = repr(raw)[:RAW_CAP]
    return InboundMessage(provider=provider, chat_id=chat_id, message_id=message_id,
                          sender_id=sender_id, text="", is_mention=False, kind=POISON_KIND,
                          poison=Poison(str(error)[:500], excerpt))
