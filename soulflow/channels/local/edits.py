"""Edits in a local transcript: how a streamed reply reads as one message.

A streamed reply is one message edited as its text grows (ReplyOptions.edit_of). The local
channel's "platform" is an append-only transcript, so an edit is a record of its own,
`{"id", "role": "assistant", "content", "edits": <id of the message it replaces>}`; readers
fold it into the message it edits. The rules every reader follows (the dashboard's API here,
the terminal in cli/chat.py, the web chat in dashboard/static/app.js):

- an edit replaces the text of the *assistant* entry named by `edits`: a user's words are
  never rewritten, whatever an edit names;
- an edit whose target is not at hand (older than the page read, or never written) is shown
  as a message of its own, and later edits of the same target replace that one, so a stream
  whose start is out of view still reads as one growing message, not one per edit.
"""

from __future__ import annotations

from typing import Any


def collapse_edits(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page `records` as it reads: each edited message once, at its place, with its
    latest text (`edited: true`); an edit of a message outside the page stays an edit record
    (a client showing that message patches it), the first such per target standing for the
    rest. Records are copied where changed, never mutated (they are the channel's cache).

    The cursor for the next read is the last *input* record's seq (the API's `last_seq`):
    the last record shown may be older. (A reader that used it anyway reads the folded edits
    again, as edits of a message before its page, and still shows the right text.)"""
    shown: list[dict[str, Any]] = []
    slot: dict[str, int] = {}  # message id (or edited target id) -> index in `shown`
    for record in records:
        target = record.get("edits")
        if isinstance(target, str) and record.get("role") == "assistant":
            at = slot.get(target)
            if at is not None:
                merged = dict(shown[at])
                merged["content"] = record.get("content", "")
                merged["edited"] = True
                if record.get("partial"):  # still growing: its final text follows
                    merged["partial"] = True
                else:
                    merged.pop("partial", None)
                shown[at] = merged
                continue
            slot[target] = len(shown)  # later edits of this target replace this one
        elif record.get("role") == "assistant" and isinstance(record.get("id"), str):
            slot.setdefault(record["id"], len(shown))
        shown.append(record)
    return shown
