"""`/metrics`: the daemon's numbers in the Prometheus text format (version 0.0.4).

Written by hand rather than with prometheus_client: the daemon already keeps every number
(bus counters, provider stats, run histogram), the format is a few lines per family, and the
daemon stays free of a dependency it would use for formatting only. The tests parse this
output with prometheus_client's own parser. Label values are escaped; no free text (errors,
message content) is ever a label, so nothing secret can reach a scrape.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.runtime.view import DaemonView
from soulflow.telemetry import Histogram

if TYPE_CHECKING:
    from soulflow.dashboard.connections import ConnectionCounts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = dict[str, str]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class MetricsWriter:
    """Collects metric families, then renders them in order (one HELP/TYPE per family)."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Labels, float]]) -> None:
        if kind == "counter":
            name += "_total"  # the text format names a counter family by its sample
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self._lines.append(f"{name}{_labels(labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str,
                  series: Iterable[tuple[Labels, Histogram]]) -> None:
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} histogram")
        for labels, histogram in series:
            for le, count in histogram.cumulative():
                self._lines.append(f"{name}_bucket{_labels({**labels, 'le': le})} {count}")
            self._lines.append(f"{name}_sum{_labels(labels)} {_number(histogram.total)}")
            self._lines.append(f"{name}_count{_labels(labels)} {histogram.count}")

    def render(self) -> str:
        return "\n".join(self._lines) + "\n"


def open_descriptors() -> tuple[int, int]:
    """(open file descriptors, of which sockets) of this process, from /proc/self/fd; (-1, -1)
    where there is no /proc (the metric is then left out)."""
    fd_dir = Path("/proc/self/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return -1, -1
    sockets = 0
    for name in names:
        try:
            if os.readlink(fd_dir / name).startswith("socket:"):
                sockets += 1
        except OSError:
            continue  # closed while listing (the listing's own fd, typically)
    return len(names), sockets


def render_metrics(runtime: DaemonView, *, sse_clients: int,
                   connections: ConnectionCounts | None = None) -> str:
    """The whole scrape."""
    out = MetricsWriter()
    traffic = runtime.traffic.channels()
    names = sorted(set(runtime.channels.names()) | set(traffic))

    def per_channel(field: str) -> list[tuple[Labels, float]]:
        return [({"channel": n}, getattr(traffic.get(n) or runtime.traffic.channel(n), field))
                for n in names]

    out.family("soulflow_messages_received", "counter",
               "Messages taken in from a channel (journaled), per channel.",
               per_channel("received"))
    out.family("soulflow_messages_sent", "counter",
               "Messages delivered to a channel, per channel.", per_channel("sent"))
    out.family("soulflow_send_failures", "counter",
               "Failed send attempts (each inline retry counts), per channel.",
               per_channel("send_failures"))
    out.family("soulflow_dead_lettered", "counter",
               "Messages moved to the outbound DLQ, per channel.", per_channel("dead_lettered"))
    out.family("soulflow_send_retries", "counter",
               "Sends put back in the outbox with a backoff, by reason.",
               [({"reason": r}, n) for r, n in sorted(runtime.traffic.retries.items())])
    health = {h.name: h for h in runtime.health}
    out.family("soulflow_channel_up", "gauge",
               "1 when the channel's last read or connect succeeded.",
               [({"channel": n}, 1 if health.get(n) and health[n].state.value == "connected"
                 else 0) for n in runtime.channels.names()])
    bus, stats = runtime.bus, runtime.bus.stats  # stats: refreshed by the "bus:stats" loop
    out.family("soulflow_dlq_entries", "gauge", "Entries in the dead-letter queues.",
               [({"queue": "outbound"}, stats.dlq), ({"queue": "inbound"}, stats.inbound_dlq)])
    out.family("soulflow_queue_depth", "gauge", "Work waiting, per queue.", [
        ({"queue": "inbound_pending"}, stats.inbound_pending),
        ({"queue": "inbound_queued"}, runtime.conversation.queued),
        ({"queue": "outbox_pending"}, stats.outbox_pending),
        ({"queue": "outbound_queued"}, bus.dispatcher.queued)])
    conversation = runtime.conversation
    out.family("soulflow_turns", "counter",
               "Messages answered, by how the turn ended (max_turns: stopped at the turn "
               "limit with a best-effort answer).",
               [({"outcome": "answered"}, conversation.answered_count),
                ({"outcome": "max_turns"}, conversation.max_turns_count),
                ({"outcome": "failed"}, conversation.failed_count)])
    out.family("soulflow_active_runs", "gauge", "Agent runs being driven now.",
               [({}, runtime.conversation.runs.count())])
    out.histogram("soulflow_run_duration_seconds",
                  "Agent runs from start to finish (approval waits included).",
                  [({}, runtime.run_durations)])
    stats = runtime.providers.stats.all()
    out.family("soulflow_provider_requests", "counter", "Model requests, per provider.",
               [({"provider": s.name}, s.calls) for s in stats])
    out.family("soulflow_provider_errors", "counter", "Failed model requests, by kind.",
               [({"provider": s.name, "kind": k}, n) for s in stats
                for k, n in sorted(s.errors.items())])
    out.histogram("soulflow_provider_latency_seconds", "Model request latency, per provider.",
                  [({"provider": s.name}, s.histogram) for s in stats])
    counted = sorted(runtime.usage.counters.items())
    out.family("soulflow_model_tokens", "counter",
               "Model tokens since the daemon started, per provider, model and kind.",
               [({"provider": p, "model": m, "kind": kind}, n) for (p, m), t in counted
                for kind, n in (("prompt", t.prompt_tokens),
                                ("completion", t.completion_tokens))])
    out.family("soulflow_model_cost_usd", "counter",
               "Model cost in USD since the daemon started, per provider and model.",
               [({"provider": p, "model": m}, t.cost_usd) for (p, m), t in counted])
    fds, sockets = open_descriptors()
    if fds >= 0:
        out.family("soulflow_open_fds", "gauge", "Open file descriptors of the daemon.",
                   [({}, fds)])
        out.family("soulflow_open_connections", "gauge",
                   "Open sockets of the daemon (listening, platform and model connections).",
                   [({}, sockets)])
    out.family("soulflow_sse_clients", "gauge", "Dashboards following the event stream.",
               [({}, sse_clients)])
    if connections is not None:
        out.family("soulflow_dashboard_connections", "gauge",
                   "Open connections to the dashboard (its caps bound them).",
                   [({}, connections.open)])
        out.family("soulflow_dashboard_connections_closed", "counter",
                   "Dashboard connections the daemon ended: refused over a cap, evicted to "
                   "make room, or timed out without a request head.",
                   [({"reason": reason.value}, n) for reason, n in connections.closed().items()])
    out.family("soulflow_asyncio_tasks", "gauge", "asyncio tasks alive in the daemon.",
               [({}, len(asyncio.all_tasks()))])
    uptime = time.time() - runtime.started_at if runtime.started_at else 0.0
    out.family("soulflow_uptime_seconds", "gauge", "Seconds since the daemon started.",
               [({}, round(uptime, 3))])
    return out.render()
