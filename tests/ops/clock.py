"""A clock the ops tests move by hand."""

from __future__ import annotations

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now
