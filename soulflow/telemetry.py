"""Small in-process measurements: histograms and recent-latency windows.

The dashboard's `/metrics` and `/api/state` read these; the daemon writes the Prometheus text
format itself (soulflow/dashboard/metrics.py), so the daemon has no metrics dependency. Every
record is bounded: a daemon that runs for months keeps the same few numbers per series.
Imports nothing of soulflow, so any layer may hold one.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

#: seconds; covers a fast local reply (0.05 s) to a long agent run with tools (10 min)
RUN_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                                    300.0, 600.0)
#: seconds; one model request, streaming included
LATENCY_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(slots=True)
class Histogram:
    """Cumulative counts per upper bound, as Prometheus histograms are read (`le`)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; +Inf last
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(`le` label, cumulative count) per bucket, `+Inf` last."""
        rows, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            rows.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return rows


@dataclass(slots=True)
class LatencyWindow:
    """The last `size` durations, for "p50 / p95 of the last N calls" on the page."""

    size: int = 50
    values: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.values = deque(self.values, maxlen=self.size)  # the deque drops the oldest

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def percentile(self, fraction: float) -> float | None:
        if not self.values:
            return None
        ordered = sorted(self.values)
        index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
        return ordered[index]

    def summary(self) -> dict[str, float | int | None]:
        last = self.values[-1] if self.values else None
        return {"samples": len(self.values), "last_s": _round(last),
                "p50_s": _round(self.percentile(0.5)), "p95_s": _round(self.percentile(0.95))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
