"""The bookkeeping that keeps a Discord channel's live messages behind its catch-up
(soulflow/channels/discord/catch_up.py), without a gateway: which messages wait, which are
released, and that a catch-up of an abandoned session cannot release a newer session's."""

from __future__ import annotations

from soulflow.channels.discord.catch_up import ChannelCatchUp
from soulflow.contracts import InboundMessage


def message(channel: int, message_id: int, kind: str = "message") -> InboundMessage:
    return InboundMessage(provider="discord", chat_id=str(channel), message_id=str(message_id),
                          sender_id="1", text="hi", kind=kind)


def test_live_messages_of_a_known_channel_wait_for_its_catch_up_in_order() -> None:
    released: list[str] = []
    state = ChannelCatchUp(lambda m: released.append(m.message_id))
    state.cursors.update({1: 10, 2: 20})
    state.session_starting()
    assert state.behind() == [1, 2]
    assert state.hold(message(1, 12)) and state.hold(message(1, 13))
    assert not state.hold(message(3, 30))  # a channel with no cursor: nothing to fetch first
    assert not state.hold(message(1, 14, kind="reaction"))
    state.caught_up(1, state.session)
    assert released == ["12", "13"] and state.behind() == [2] and state.held == 0
    assert not state.hold(message(1, 15))  # caught up: live messages pass from now on


def test_a_catch_up_of_an_abandoned_session_releases_nothing_of_the_next() -> None:
    released: list[str] = []
    state = ChannelCatchUp(lambda m: released.append(m.message_id))
    state.cursors[1] = 10
    state.session_starting()
    old = state.session
    assert state.hold(message(1, 12))
    state.session_starting()  # the session died; a new one identifies: 12 is fetched again
    assert state.held == 0 and state.hold(message(1, 13))
    state.caught_up(1, old)  # the old catch-up finishes its fetch of channel 1 late
    assert released == [] and state.behind() == [1]
    state.forget(1, state.session)  # the channel went away: what waited goes on
    assert released == ["13"] and 1 not in state.cursors
