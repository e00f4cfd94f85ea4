"""Quarantine of inbound messages that cannot be taken in.

An adapter that cannot parse one platform update returns `poison_message(...)` in its batch
(`soulflow.channels.poison`) instead of dropping it silently: the intake then records it in
the inbound dead-letter store before the adapter's cursor moves past it (see
`security/dead_letters.py`). Every step of taking in one message (normalising, filtering, sealing,
journaling) runs in `stage(...)`, so an error names where it happened; a journaled message
whose turn fails is recorded at the stage `process`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from soulflow.backends.base import InboundDeadLetterStore
from soulflow.channels.normalize import scrub_surrogates
from soulflow.channels.poison import POISON_KIND
from soulflow.contracts import InboundDeadLetter, InboundMessage, IntakeStage
from soulflow.errors import SoulFlowError, StoreUnavailable

log = logging.getLogger(__name__)

APOLOGY = ("I could not take in your message safely, so I set it aside without answering it; "
           "the operator can see it with `soulflow dlq list --inbound`. Please try again, "
           "perhaps worded differently.")


class IntakeError(SoulFlowError):
    """Taking in one message failed at `stage`. The conversation's one exception, so its
    base: everything else that goes wrong in a turn is its layers' own."""

    def __init__(self, stage: IntakeStage, error: str) -> None:
        super().__init__(f"{stage}: {error}")
        self.stage = stage
        self.error = error


@contextmanager
def stage(name: IntakeStage) -> Iterator[None]:
    """Turn any error inside the block into an `IntakeError` naming this stage; but a store
    that did not answer (Redis away) is not the message's fault: that error passes on, the
    adapter's cursor stays, and the message is read again once the store answers, instead
    of being quarantined."""
    try:
        yield
    except (IntakeError, StoreUnavailable):
        raise
    except Exception as exc:
        raise IntakeError(name, f"{type(exc).__name__}: {exc}") from exc


def safe_key(text: str) -> str:
    """A key that can be journaled whatever it holds (lone surrogates become U+FFFD)."""
    return scrub_surrogates(text)


class Quarantine:
    """Records a message in the inbound DLQ and marks its id seen, so it is never retried.

    Both writes must succeed before the caller lets the adapter move its cursor: an error
    here propagates, the channel loop restarts, and the message is read and recorded again.
    """

    def __init__(self, letters: InboundDeadLetterStore,
                 mark_seen: Callable[[list[str]], Awaitable[None]],
                 *, on_record: Callable[[InboundDeadLetter], None] | None = None) -> None:
        self.letters = letters
        self._mark_seen = mark_seen
        self._on_record = on_record
        self.count = 0

    async def record(self, message: InboundMessage, stage_name: IntakeStage | str,
                     error: str) -> str:
        key = safe_key(message.key)
        raw = message.poison.raw if message.kind == POISON_KIND and message.poison else None
        if not isinstance(raw, str):
            raw = json.dumps({k: v for k, v in message.to_dict().items() if k != "text"},
                             ensure_ascii=True, default=repr)
        letter = await self.letters.add(
            provider=message.provider, chat_id=message.chat_id, message_id=message.message_id,
            sender_id=message.sender_id, stage=stage_name, error=error, content=message.text,
            raw=raw, key=key)
        await self._mark_seen([key])
        self.count += 1
        if self._on_record is not None:
            self._on_record(letter)
        log.error("quarantined inbound %s at stage %s: %s (see `soulflow dlq list --inbound`)",
                  key, stage_name, safe_key(error)[:300])
        return key
