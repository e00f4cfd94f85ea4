"""The streamed-reply planner: pacing, 429 backoff, no unchanged edits, length continuation,
no half-written tool calls. Clock injected: times are plain numbers."""

from __future__ import annotations

from soulflow.agent.toolcall_text import TextStreamFilter
from soulflow.bus.stream_edits import EditKind, StreamPlan, split_pieces


def _drain(plan: StreamPlan, now: float) -> list[tuple[str, int, str]]:
    made = []
    while (action := plan.due(now)) is not None:
        plan.done(action, now)
        made.append((action.kind.value, action.index, action.text))
        now += plan.interval_s
    return made


def test_first_text_sends_then_one_edit_per_interval() -> None:
    plan = StreamPlan(limit=4096, interval_s=1.0)
    plan.update("Hel")
    first = plan.due(0.0)
    assert first is not None and first.kind is EditKind.SEND and first.text == "Hel"
    plan.done(first, 0.0)
    plan.update("Hello wor")
    assert plan.due(0.5) is None  # inside the interval
    edit = plan.due(1.0)
    assert edit is not None and edit.kind is EditKind.EDIT and edit.text == "Hello wor"
    plan.done(edit, 1.0)
    assert plan.due(5.0) is None  # unchanged: no edit


def test_final_text_always_lands_after_a_429() -> None:
    plan = StreamPlan(limit=4096, interval_s=1.0)
    plan.update("partial")
    plan.done(plan.due(0.0), 0.0)
    plan.finish("partial and the rest")
    plan.throttled(retry_after_s=7.0, now=1.0)
    assert plan.due(7.9) is None
    action = plan.due(8.0)
    assert action is not None and action.text == "partial and the rest"
    plan.done(action, 8.0)
    assert plan.complete


def test_past_the_limit_it_continues_in_a_new_message() -> None:
    plan = StreamPlan(limit=10, interval_s=1.0)
    plan.update("abcdefgh")
    plan.done(plan.due(0.0), 0.0)
    plan.finish("abcdefghijklmnopqrstuv")
    made = _drain(plan, 1.0)
    assert made == [("edit", 0, "abcdefghij"), ("send", 1, "klmnopqrst"), ("send", 2, "uv")]
    assert plan.complete and "".join(plan.shown) == "abcdefghijklmnopqrstuv"


def test_piece_boundaries_do_not_move_as_text_grows() -> None:
    text = "line one\nline two is long\n" * 40
    for grow in range(len(text) // 2, len(text)):
        early = split_pieces(text[:grow], 50)
        late = split_pieces(text, 50)
        assert early[:-1] == late[:len(early) - 1]
    assert all(len(p) <= 50 for p in split_pieces(text, 50))


def test_tool_call_text_is_never_shown() -> None:
    """The agent's filter feeds the plan: a half-written call never reaches a message."""
    gate, shown = TextStreamFilter(), ""
    plan = StreamPlan(limit=4096, interval_s=1.0)
    sent: list[str] = []
    for now, delta in enumerate(["Let me look.\n", "```tool", "_call\n{\"name\": ", "\"web_fe"]):
        shown += gate.feed(delta)
        plan.update(shown)
        if (action := plan.due(float(now))) is not None:
            plan.done(action, float(now))
            sent.append(action.text)
    assert sent == ["Let me look.\n"]
    assert all("{" not in text for text in plan.shown)
    empty = StreamPlan(limit=4096, interval_s=1.0)
    empty.update(TextStreamFilter().feed('<function=shell>{"cmd": "rm'))
    assert empty.due(0.0) is None  # nothing showable yet: no empty message


def test_a_flood_of_deltas_stays_within_the_interval() -> None:
    plan = StreamPlan(limit=4096, interval_s=1.0)
    calls: list[float] = []
    text = ""
    for tick in range(2000):  # a delta every 10 ms for 20 s
        now = tick * 0.01
        text += "w "
        plan.update(text)
        if (action := plan.due(now)) is not None:
            plan.done(action, now)
            calls.append(now)
    plan.finish(text.strip())
    now = 20.0
    while not plan.complete:
        if (action := plan.due(now)) is not None:
            plan.done(action, now)
            calls.append(now)
        now += 0.01
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(calls, calls[1:], strict=False))
    assert plan.shown == [text.strip()]
