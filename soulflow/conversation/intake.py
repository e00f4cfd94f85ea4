"""Taking messages in: normalise, filter, seal, journal, one message at a time.

The journal is the backend's inbound store (the file journal or Redis), so every step that
touches it is asynchronous. Each step runs under `stage(...)`, so any error is an
`IntakeError` naming the step; the message is then quarantined (inbound DLQ, id marked
seen) and the rest of the batch goes on. `Conversation.ingest` lets the adapter commit its cursor
only after `screen()` returns, so a message passes the cursor only once it is journaled,
recorded as seen, or quarantined.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from enum import StrEnum

from soulflow import tracing
from soulflow.backends.base import InboundStore
from soulflow.channels.normalize import normalize_inbound
from soulflow.channels.poison import POISON_KIND
from soulflow.contracts import InboundMessage, IntakeStage
from soulflow.conversation.access import AccessPolicy
from soulflow.conversation.quarantine import IntakeError, Quarantine, safe_key, stage
from soulflow.security.inbound import InboundSealer

Handler = Callable[[InboundMessage], None]

_SECRET_COMMAND = re.compile(r"\s*/secret\b")


def _every_chat(chat_key: str) -> bool:
    return True


class Verdict(StrEnum):
    FRESH = "fresh"  # journaled: it will be answered
    SEEN = "seen"  # never answered (history, other bots, not addressed, refused, reactions)
    SKIP = "skip"  # already seen before


class Route(StrEnum):
    """What intake does with a message, decided before anything is done."""

    STORE = "store"  # journal it to be answered
    IGNORE = "ignore"  # only record it as seen
    REACTION = "reaction"  # a reaction in a chat of this node: handled here at once
    REFUSE = "refuse"  # addressed to the bot by someone not allowed: told so


class InboundScreen:
    def __init__(self, journal: InboundStore, access: AccessPolicy,
                 sealer: InboundSealer | None, quarantine: Quarantine, *,
                 on_reaction: Handler, refuse: Handler, apologise: Handler,
                 owns: Callable[[str], bool] = _every_chat) -> None:
        self._journal = journal
        self._access = access
        self._sealer = sealer
        self.quarantine = quarantine
        self._on_reaction = on_reaction
        self._refuse = refuse
        self._apologise = apologise
        # which chats this node acts on (backend.owns): with several daemons, a reaction read
        # here for another node's chat is journaled for that node, like a message
        self._owns = owns

    async def screen(self, batch: list[InboundMessage]) -> tuple[list[InboundMessage], list[str]]:
        """(journaled messages to answer, keys to record as seen); poison is quarantined.

        Each chat's messages are taken in one after the other, in their order; the chats of
        a batch side by side, so their journal writes go to the store together (one round
        trip on Redis for a batch of many chats, `RedisInbound.accept`). An error that is not
        a message's own (the store away) is raised once every chat has finished, so what was
        journaled stays journaled, and the batch is read again."""
        by_chat: dict[str, list[int]] = {}
        for index, message in enumerate(batch):
            by_chat.setdefault(message.chat_key, []).append(index)
        verdicts: list[Verdict | None] = [None] * len(batch)
        chats = [self._screen_chat(batch, indexes, verdicts) for indexes in by_chat.values()]
        if len(chats) == 1:
            await chats[0]
        else:
            failures = [outcome for outcome in await asyncio.gather(*chats,
                                                                    return_exceptions=True)
                        if isinstance(outcome, BaseException)]
            if failures:
                raise failures[0]
        fresh = [m for m, v in zip(batch, verdicts, strict=True) if v is Verdict.FRESH]
        seen_only = [m.key for m, v in zip(batch, verdicts, strict=True) if v is Verdict.SEEN]
        return fresh, seen_only

    async def _screen_chat(self, batch: list[InboundMessage], indexes: list[int],
                           verdicts: list[Verdict | None]) -> None:
        """One chat's messages of a batch (at `indexes`), in order; each verdict into its
        batch slot."""
        for index in indexes:
            message = batch[index]
            try:
                verdicts[index] = await self.take_in(message)
            except IntakeError as exc:
                if exc.stage in (IntakeStage.SEAL, IntakeStage.JOURNAL) and \
                        await self._journal.is_seen(message.key):
                    continue  # quarantined (or journaled) before, and read again: skip it
                await self.quarantine.record(message, exc.stage, exc.error)
                if exc.stage in (IntakeStage.SEAL, IntakeStage.JOURNAL):
                    self._apologise(message)  # an allowed user who addressed the bot

    async def take_in(self, message: InboundMessage) -> Verdict:
        """Decide one message's fate; raises `IntakeError` naming the step that failed.

        The seen-id look-up comes first only where a repeat would act twice (a refusal sent,
        a reaction handled, a `/secret` command's vault write, which a later command may
        have changed since): a message to answer is journaled by `accept`, which refuses an
        id it has seen in the same step; sealing a repeat again stores the same values under
        the same names; a repeat that fails sealing again is looked up before it is
        quarantined twice (`screen`); marking an ignored one seen again changes nothing. So
        an ordinary message costs the store one call, not two."""
        if message.kind == POISON_KIND:
            if await self._journal.is_seen(safe_key(message.key)):
                return Verdict.SKIP  # quarantined before the cursor moved, read again
            raise IntakeError(IntakeStage.PARSE, message.poison.error if message.poison else "")
        with stage(IntakeStage.NORMALISE):
            normalize_inbound(message)
        with stage(IntakeStage.INTAKE):
            route = self._route(message)
        if route is Route.IGNORE:
            return Verdict.SEEN
        acts_twice = route is not Route.STORE or _SECRET_COMMAND.match(message.text)
        if acts_twice and await self._journal.is_seen(message.key):  # an error: read again
            return Verdict.SKIP
        if route is Route.STORE:
            return await self._store(message)
        with stage(IntakeStage.INTAKE):
            if route is Route.REACTION:
                self._on_reaction(message)
            else:
                self._refuse(message)
        return Verdict.SEEN

    def _route(self, message: InboundMessage) -> Route:
        """Where a message goes, from what it says and who sent it: nothing is done yet."""
        if message.priming or message.from_bot:
            return Route.IGNORE
        if message.kind == "reaction":
            if self._owns(message.chat_key):
                return Route.REACTION
            if not self._access.is_allowed(message.provider, message.sender_id):
                return Route.IGNORE  # as `on_reaction` would
        elif not (message.is_mention or message.is_direct):
            return Route.IGNORE
        if not self._access.is_allowed(message.provider, message.sender_id):
            return Route.REFUSE
        return Route.STORE

    async def take_in_trusted(self, message: InboundMessage) -> bool:
        """A message the daemon wrote itself (cron): no filters; False if seen or poison."""
        try:
            with stage(IntakeStage.NORMALISE):
                normalize_inbound(message)
            return await self._store(message) is Verdict.FRESH
        except IntakeError as exc:
            await self.quarantine.record(message, exc.stage, exc.error)
            return False

    async def _store(self, message: InboundMessage) -> Verdict:
        """Seal and journal: the intake span, the root of the message's trace, whose
        traceparent the journal keeps so its turn (here or on another node) continues it."""
        with tracing.span("soulflow.intake", {"soulflow.channel": message.provider},
                          kind=tracing.Kind.CONSUMER) as span:
            if self._sealer is not None:  # never store a message whose secrets are not sealed
                with stage(IntakeStage.SEAL):  # (the vault's calls off the loop, if any)
                    await self._sealer.seal_off_loop(message)
            message.trace = message.trace or tracing.traceparent()
            with stage(IntakeStage.JOURNAL):
                verdict = Verdict.FRESH if await self._journal.accept(message) else Verdict.SKIP
            span.set("soulflow.intake.verdict", verdict.value)
            return verdict
