"""Reading `HEARTBEAT.md` and judging the agent's answer to it.

The file is a checklist the operator keeps in the workspace. A heartbeat costs a model call,
so it is skipped when the file holds nothing to act on: only headings, comments (`<!-- -->`,
or a line that is one parenthesised aside, like the template's hint), empty checkboxes
(`- [ ]` with no text) and blank lines. Anything else is work.

The agent answers `HEARTBEAT_OK` when nothing needs a person; only other answers are sent.
"""

from __future__ import annotations

import re

__all__ = ["OK_TOKEN", "actionable_lines", "heartbeat_prompt", "is_ok_reply"]

OK_TOKEN = "HEARTBEAT_OK"
MAX_CHECKLIST_CHARS = 8_000  # a runaway file must not fill the model's window

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_HEADING = re.compile(r"^#{1,6}(\s|$)")
_EMPTY_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])?\s*(?:\[[ xX]?\])?\s*$")
_ASIDE = re.compile(r"^\(.*\)$")
_SETEXT_RULE = re.compile(r"^(=+|-+|\*{3,}|_{3,})$")
_FILLER = re.compile(r"[\s.!*_`'\"]+")


def actionable_lines(text: str) -> list[str]:
    """The checklist lines that ask for something (empty when the heartbeat can skip)."""
    lines = []
    for raw in _COMMENT.sub("", text).splitlines():
        line = raw.strip()
        if not line or _HEADING.match(line) or _EMPTY_ITEM.match(line) or \
                _ASIDE.match(line) or _SETEXT_RULE.match(line):
            continue
        lines.append(line)
    return lines


def heartbeat_prompt(checklist: str) -> str:
    """What the agent receives: the checklist and how to answer when all is well."""
    body = _COMMENT.sub("", checklist).strip()
    if len(body) > MAX_CHECKLIST_CHARS:
        body = body[:MAX_CHECKLIST_CHARS] + "\n[… the rest of HEARTBEAT.md was cut]"
    return (
        "This is a scheduled heartbeat, not a message from a person. Go through the "
        "checklist below from HEARTBEAT.md and do what it asks, using your tools where "
        "needed.\n"
        f"If nothing needs a person's attention, answer exactly {OK_TOKEN} and nothing "
        "else. Otherwise answer with a short notice saying what needs attention; it is sent "
        "to the operator's chat.\n\n"
        f"{body}")


def is_ok_reply(text: str) -> bool:
    """True when the answer is the all-clear token, possibly dressed in punctuation or
    markdown (`**HEARTBEAT_OK**`, `HEARTBEAT_OK.`); any other words make it a notice."""
    if OK_TOKEN not in text:
        return False
    return not _FILLER.sub("", text.replace(OK_TOKEN, ""))
