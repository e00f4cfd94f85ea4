"""ReplyStream: a reply shown while the model writes it, within the chat's pace.

The channel here is an in-memory adapter that keeps messages by id and can be told to answer
the next call with a 429: the stream's own rules (interval, shared pacing, 429s, ids recorded,
redaction, a resumed leg) are what is tested; the platforms' SDKs are tested in
tests/e2e/test_streaming.py.
"""

from __future__ import annotations

import asyncio
import time

from soulflow.agent.run.showing import ShownLeg
from soulflow.bus.pacing import ChatPacer, SendBudget
from soulflow.channels.base import ChannelAdapter, ChannelLimits
from soulflow.contracts import ChatRef, InboundMessage, OutboundMessage, SendError, SendResult
from soulflow.conversation.streaming import ReplyStream
from soulflow.security.redact import Redactor
from tests.waiting import until

INTERVAL = 0.05
CHAT = ChatRef("memo", "c1")


class EditingChannel(ChannelAdapter):
    """Messages by id; `send` with `edit_of` replaces one. `fail_next` raises on the next call."""

    name = "memo"
    can_stream = True

    def __init__(self, max_text: int = 4000) -> None:
        self.limits = ChannelLimits(max_text=max_text, chunk_size=max_text)
        self.messages: dict[str, str] = {}
        self.calls: list[tuple[float, str, str]] = []  # (when, "send"/"edit", text)
        self.fail_next: SendError | None = None

    async def read(self) -> list[InboundMessage]:
        return []

    async def send(self, message: OutboundMessage) -> SendResult:
        kind = "edit" if message.options.edit_of else "send"
        self.calls.append((time.monotonic(), kind, message.content))
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        platform_id = message.options.edit_of or f"m{len(self.messages) + 1}"
        self.messages[platform_id] = message.content
        return SendResult(platform_message_ids=[platform_id])


def stream_on(channel: EditingChannel, *, shown: tuple[str, ...] = (),
              pacer: ChatPacer | None = None,
              redactor: Redactor | None = None) -> tuple[ReplyStream, list[tuple[int, str]]]:
    recorded: list[tuple[int, str]] = []
    stream = ReplyStream(channel, CHAT, reply_to="u1", pacer=pacer or ChatPacer(),
                         interval_s=INTERVAL,
                         redact_growing=(redactor or Redactor()).redact_growing)
    stream.begin(ShownLeg("run_1", 0, shown, lambda i, pid: recorded.append((i, pid))))
    return stream, recorded


async def test_a_growing_answer_is_one_message_edited_at_most_once_an_interval() -> None:
    channel = EditingChannel()
    stream, recorded = stream_on(channel)
    stream.restart()
    words = [f"word{i} " for i in range(40)]
    for word in words:
        stream.feed(word)
        await asyncio.sleep(0.005)
    await until(lambda: channel.messages.get("m1", "").startswith("".join(words[:30])))
    pieces = await stream.close()
    assert len(channel.messages) == 1, channel.calls
    assert [kind for _, kind, _ in channel.calls][:1] == ["send"]
    assert {kind for _, kind, _ in channel.calls[1:]} <= {"edit"}
    gaps = [b[0] - a[0] for a, b in zip(channel.calls, channel.calls[1:], strict=False)]
    assert all(gap >= INTERVAL * 0.9 for gap in gaps), gaps
    assert recorded == [(0, "m1")]
    assert pieces.ids == ("m1",) and pieces.texts == (channel.messages["m1"],)


async def test_an_answer_complete_within_the_first_interval_sends_nothing() -> None:
    channel = EditingChannel()
    stream, recorded = stream_on(channel)
    stream.restart()
    stream.feed("quick answer, all at once")
    pieces = await stream.close()
    assert channel.calls == [] and recorded == [] and pieces.ids == ()


async def test_unchanged_text_is_not_edited_again() -> None:
    channel = EditingChannel()
    stream, _ = stream_on(channel)
    stream.restart()
    stream.feed("steady text that stops here and ")
    await until(lambda: bool(channel.calls))
    await asyncio.sleep(INTERVAL * 4)
    await stream.close()
    assert len(channel.calls) == 1


async def test_a_429_on_an_edit_holds_the_stream_and_the_chats_replies() -> None:
    channel = EditingChannel()
    pacer = ChatPacer()
    stream, _ = stream_on(channel, pacer=pacer)
    stream.restart()
    stream.feed("first words of it ")
    await until(lambda: len(channel.calls) == 1)
    before = time.time()
    channel.fail_next = SendError("Too Many Requests", retry_after=0.4)
    stream.feed("and more words ")
    await until(lambda: len(channel.calls) == 2)
    limited_at = channel.calls[1][0]
    # the dispatcher paces the chat's replies by the same pacer: they wait too
    assert pacer.ready_at(CHAT.key, 0.0) >= before + 0.4
    stream.feed("then even more ")
    await until(lambda: len(channel.calls) == 3, timeout=5)
    assert channel.calls[2][0] - limited_at >= 0.35
    await stream.close()
    assert channel.messages["m1"].startswith("first words of it and more words")


async def test_past_the_length_limit_the_text_goes_on_in_a_new_message() -> None:
    channel = EditingChannel(max_text=40)
    stream, recorded = stream_on(channel)
    stream.restart()
    for i in range(30):
        stream.feed(f"part{i:02d} ")
    await until(lambda: len(channel.messages) >= 3, timeout=5)
    pieces = await stream.close()
    assert all(len(text) <= 40 for text in channel.messages.values())
    assert [index for index, _ in recorded] == list(range(len(pieces.ids)))
    assert "".join(channel.messages[i] for i in pieces.ids).startswith(
        "".join(f"part{i:02d} " for i in range(12)))


async def test_a_leg_shown_before_a_restart_is_edited_not_sent_again() -> None:
    channel = EditingChannel()
    channel.messages["m7"] = "half an answ"  # what the killed daemon had shown
    stream, recorded = stream_on(channel, shown=("m7",))
    stream.restart()
    stream.feed("half an answer, and now the rest of it ")
    await until(lambda: bool(channel.calls))
    pieces = await stream.close()
    assert [kind for _, kind, _ in channel.calls] == ["edit"]
    assert channel.messages == {"m7": "half an answer, and now the rest of it "}
    assert recorded == [] and pieces.ids == ("m7",)


async def test_a_secret_is_never_shown_even_half_written() -> None:
    secret = "hunter2-correct-horse-battery"
    redactor = Redactor([secret])
    channel = EditingChannel()
    stream, _ = stream_on(channel, redactor=redactor)
    stream.restart()
    text = f"the password is {secret} and that is all there is to say about it "
    for char in text:
        stream.feed(char)
        await asyncio.sleep(0.001)
    await until(lambda: "[REDACTED]" in channel.messages.get("m1", ""), timeout=5)
    await stream.close()
    shown = [text for _, _, text in channel.calls]
    for prefix_len in range(8, len(secret) + 1):
        assert not any(secret[:prefix_len] in text for text in shown), secret[:prefix_len]


async def test_a_refused_first_piece_stops_the_stream_quietly() -> None:
    channel = EditingChannel()
    channel.fail_next = SendError("chat not found", permanent=True)
    stream, recorded = stream_on(channel)
    stream.restart()
    stream.feed("something to show ")
    await until(lambda: bool(channel.calls))
    stream.feed("more to show ")
    await asyncio.sleep(INTERVAL * 3)
    pieces = await stream.close()
    assert len(channel.calls) == 1 and recorded == [] and pieces.ids == ()


def test_only_the_start_of_a_known_value_is_held_back() -> None:
    redactor = Redactor(["s3cret-value-of-some-length"])
    assert redactor.redact_growing("plain words so far and ") == "plain words so far and "
    assert redactor.redact_growing("the key is s3cret-val") == "the key is "
    assert redactor.redact_growing("the key is s3cret-value-of-some-length ok ") == (
        "the key is [REDACTED] ok ")
    # the word being written waits (a token may still grow into a detected one)
    assert redactor.redact_growing("a token: ghp_abc") == "a token: "


def test_a_budget_leaves_its_reserve_to_the_replies() -> None:
    now = [1000.0]
    pacer = ChatPacer(clock=lambda: now[0])
    budget = SendBudget(5, 60.0)
    for _ in range(3):
        pacer.sent("t:-1", budget)
        now[0] += 1.0
    # a stream keeping 2 for the replies has used its 3: room when the first call is a
    # minute old; a reply may still go now
    assert pacer.ready_at("t:-1", 0.0, budget, reserve=2) == 1060.0
    assert pacer.wait_s("t:-1", 0.0, budget) <= 0
    pacer.sent("t:-1", budget)
    pacer.sent("t:-1", budget)
    assert pacer.ready_at("t:-1", 0.0, budget) == 1060.0  # full: the oldest leaves it
    now[0] = 1061.0
    assert pacer.wait_s("t:-1", 0.0, budget) <= 0


async def test_a_group_chats_stream_stays_inside_its_budget() -> None:
    channel = EditingChannel()
    channel.chat_budget = lambda chat_id: SendBudget(6, 1.0)  # type: ignore[method-assign]
    stream, _ = stream_on(channel)
    stream.restart()
    for i in range(60):
        stream.feed(f"w{i} ")
        await asyncio.sleep(0.01)
    await stream.close()
    times = [at for at, _, _ in channel.calls]
    # 6 a second, 4 kept for replies: at most 2 of the stream's calls in any second
    assert all(sum(1 for t in times if start <= t < start + 1.0) <= 2 for start in times)
    assert len(times) >= 2
