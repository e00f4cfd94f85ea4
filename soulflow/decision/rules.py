"""What a decision is and the rules on decisions that every store applies.

Keys are canonicalised so the same decision phrased twice is stored once (`canonical_key`); a
higher or equal priority overrides, a lower one does not (`keeps_current`); entries whose keys
canonicalise alike merge into one (`merge_canonical`). The stores apply the priority rule
inside their own atomic write (`backends/base.py` `DecisionStore`), so it holds across nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)


def canonical_key(key: str) -> str:
    """Lower-case words joined by `_`: `Reply Language` and `reply-language` are one key."""
    canonical = _NON_WORD.sub("_", key.casefold()).strip("_")
    if not canonical:
        raise ValueError("a decision key needs at least one letter or digit")
    return canonical


@dataclass(slots=True)
class Decision:
    key: str
    value: str
    priority: int = 0
    source: str = ""
    updated_at: float = 0.0


def keeps_current(current: Decision | None, value: str, priority: int) -> bool:
    """The priority rule: a stored decision stays when it outranks the new one, or says the
    same thing at the same priority (a repeat does not refresh `updated_at`)."""
    return current is not None and (current.priority > priority or
                                    (current.value, current.priority) == (value, priority))


def merge_canonical(stored: dict[str, Decision]) -> dict[str, Decision]:
    """Entries whose keys canonicalise alike merged into one (higher priority wins, then the
    newer); keys with no letter or digit dropped."""
    merged: dict[str, Decision] = {}
    for key_as_stored, decision in stored.items():
        try:
            key = canonical_key(key_as_stored)
        except ValueError:
            continue
        candidate = Decision(key, decision.value, decision.priority, decision.source,
                             decision.updated_at)
        current = merged.get(key)
        if current is None or (candidate.priority, candidate.updated_at) > \
                (current.priority, current.updated_at):
            merged[key] = candidate
    return merged
