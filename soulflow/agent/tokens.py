"""A cheap token estimate, good enough to keep a request under a context budget.

Real tokenizers differ per model (and the daemon talks to several), so exactness is not
available anyway; what the budget needs is a fast, deterministic, slightly pessimistic guess
that costs nothing per turn. The approximation:

* text: one token per 4 characters, rounded up (`ceil(len(text) / 4)`). This is the usual
  rule of thumb for English and code with BPE tokenizers. It UNDER-estimates scripts that
  tokenize densely: Korean, Chinese and Japanese text often costs about one token per
  character, so for such chats set the budget well below the model's real window;
* every message: a fixed overhead (`MESSAGE_OVERHEAD_TOKENS`) for the role and the
  separators a chat template adds around it;
* tool calls on assistant messages: their JSON, estimated like text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """`ceil(len(text) / 4)`: 0 for an empty string, 1 for one to four characters."""
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_message_tokens(message: dict[str, Any]) -> int:
    """One chat message: its content (text, or the JSON of structured content), its tool
    calls, plus the per-message overhead."""
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = json.dumps(content, ensure_ascii=False)
    tokens = MESSAGE_OVERHEAD_TOKENS + estimate_tokens(text)
    tool_calls = message.get("tool_calls")
    if tool_calls:
        tokens += estimate_tokens(json.dumps(tool_calls, ensure_ascii=False, default=str))
    return tokens


def estimate_messages_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """The sum over `messages`."""
    return sum(estimate_message_tokens(m) for m in messages)
