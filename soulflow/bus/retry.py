"""Backoff arithmetic for outbound retries, with the clock and randomness injectable."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded; `retry_after` from a platform always wins."""

    max_attempts: int = 8
    inline_retries: int = 2
    inline_delay_s: float = 0.2
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    jitter: float = 0.2

    def delay(self, attempt: int, *, retry_after: float | None = None,
              rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before attempt number `attempt + 1` (attempt counts from 1).

        A platform's `retry_after` is a floor: sending earlier would only earn another 429.
        """
        exponential = min(self.max_delay_s, self.base_delay_s * (2 ** max(0, attempt - 1)))
        jittered = exponential * (1 - self.jitter + 2 * self.jitter * rand())
        wait = min(self.max_delay_s, jittered)
        if retry_after is not None:
            wait = max(wait, retry_after)
        return wait
