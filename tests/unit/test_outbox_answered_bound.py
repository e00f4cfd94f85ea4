"""The outbox's answered keys are a bounded window of the newest replies, across restarts.

The set only has to answer "was this resumed message already replied to?" for a crash between
a reply's put and its inbound `done` record; a soak showed the old 100,000-key cap as a steady
RSS climb, so the window is `ANSWERED_KEPT` keys and must stay there however many replies pass.
"""

from __future__ import annotations

from pathlib import Path

from soulflow.backends.file.outbox import ANSWERED_KEPT, Outbox
from soulflow.contracts import OutboundMessage


def reply(i: int) -> OutboundMessage:
    return OutboundMessage(provider="fake", chat_id=f"c{i % 7}", content=f"reply {i}",
                           message_id=f"o{i}", inbound_key=f"local:c{i % 7}:m{i}")


def answered_count(box: Outbox, total: int) -> int:
    return sum(box.has_answered(reply(i).inbound_key or "") for i in range(total))


def test_answered_keys_stay_bounded_and_the_newest_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "outbox.jsonl"
    box = Outbox(path)
    total = ANSWERED_KEPT + 1_500
    for i in range(total - 1):
        assert box.put(reply(i))
        box.mark_sent(f"o{i}")
    box.compact()  # a compaction writes the window, not every key ever answered
    assert box.put(reply(total - 1))  # put, then the process dies before anything else
    box.close()

    reopened = Outbox(path)
    assert answered_count(reopened, total) == ANSWERED_KEPT
    assert reopened.has_answered(reply(total - 1).inbound_key or "")  # the crash case
    assert reopened.has_answered(reply(total - ANSWERED_KEPT).inbound_key or "")
    assert not reopened.has_answered(reply(0).inbound_key or "")
    assert [e.message.message_id for e in reopened.pending()] == [f"o{total - 1}"]

    reopened.compact()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == ANSWERED_KEPT + 1  # the window plus the one pending put
    reopened.close()
