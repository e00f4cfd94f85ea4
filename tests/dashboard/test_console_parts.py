"""The console's building blocks: the hub's replay ring, the per-minute traffic ring, the
histogram, provider stats measured around real provider calls, the metrics text writer."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from soulflow.bus.traffic import RING_MINUTES, TrafficCounters
from soulflow.contracts import ProviderError
from soulflow.dashboard.metrics import MetricsWriter
from soulflow.events.hub import EventHub
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.registry import ProviderRegistry
from soulflow.telemetry import Histogram, LatencyWindow
from tests.fakes.openai_api import FakeOpenAI


def test_hub_replays_what_a_reconnecting_page_missed() -> None:
    hub = EventHub(history=5)
    for n in range(3):
        hub.publish("x", {"n": n})
    fresh = hub.replay_after(None, fresh=2)
    assert [e["data"]["n"] for e in fresh.events] == [1, 2] and not fresh.gap
    seen = hub.event_id(fresh.events[0])  # the page saw n=1
    after = hub.replay_after(seen)
    assert [e["data"]["n"] for e in after.events] == [2] and not after.gap
    for n in range(3, 10):
        hub.publish("x", {"n": n})  # the ring (5) no longer holds n=2..4
    late = hub.replay_after(seen)
    assert [e["data"]["n"] for e in late.events] == [5, 6, 7, 8, 9] and late.gap
    other = hub.replay_after("beef.3")  # another process's id: a restart
    assert len(other.events) == 5 and other.gap
    assert hub.replay_after("garbage").gap


def test_traffic_ring_keeps_the_last_hour_per_minute() -> None:
    now = [600_000.0]
    traffic = TrafficCounters(clock=lambda: now[0])
    traffic.observe("inbound.received", {"provider": "slack"})
    traffic.observe("outbound.sent", {"provider": "slack"})
    traffic.observe("outbound.retry", {"provider": "slack", "reason": "rate_limited"})
    traffic.observe("outbound.dead", {"provider": "slack"})
    traffic.send_outcome("slack", "boom")
    traffic.send_outcome("slack", None)
    now[0] += 120  # two minutes later
    traffic.observe("inbound.received", {"provider": "slack"})
    chart = traffic.per_minute(["slack", "local"])
    slack = chart["channels"]["slack"]
    assert len(slack["in"]) == RING_MINUTES and slack["in"][-1] == 1 and slack["in"][-3] == 1
    assert sum(slack["out"]) == 1 and sum(chart["channels"]["local"]["in"]) == 0
    assert chart["start"] == (int(now[0] // 60) - RING_MINUTES + 1) * 60
    record = traffic.channel("slack")
    assert (record.received, record.sent, record.dead_lettered, record.send_failures) == \
        (2, 1, 1, 1)
    assert traffic.retries == {"rate_limited": 1}
    now[0] += 3600  # an hour on, the old minutes are dropped from memory as new ones come
    traffic.observe("inbound.received", {"provider": "slack"})
    assert len(traffic.channel("slack").minutes) == 1
    assert sum(traffic.per_minute()["channels"]["slack"]["in"]) == 1


def test_histogram_and_latency_window() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert histogram.count == 4 and histogram.total == pytest.approx(7.65)
    window = LatencyWindow(size=3)
    for value in (1.0, 2.0, 3.0, 4.0):
        window.add(value)
    assert window.summary() == {"samples": 3, "last_s": 4.0, "p50_s": 3.0, "p95_s": 4.0}


async def test_provider_stats_measure_real_calls_and_errors() -> None:
    async with FakeOpenAI() as fake:
        registry = ProviderRegistry()
        registry.register(OpenAICompatibleProvider(OpenAICompatibleConfig(
            name="local", base_url=fake.base_url, model="m", max_retries=0)))
        chain = registry.chain()
        fake.script_reply("hi")
        await chain.chat([{"role": "user", "content": "hello"}])
        fake.script_error(400)
        with pytest.raises(ProviderError):
            await chain.chat([{"role": "user", "content": "again"}])
        abort = asyncio.Event()
        abort.set()
        with pytest.raises(ProviderError) as aborted:
            await chain.chat([{"role": "user", "content": "stop"}], abort=abort)
        await registry.close()
    [stats] = registry.stats.all()
    record = stats.to_dict()
    assert record["name"] == "local" and record["calls"] == 2  # an abort is not a call outcome
    assert aborted.value.kind == "aborted"
    assert record["errors"] == {"bad_request": 1} and record["healthy"] is False
    assert record["latency"]["samples"] == 1 and stats.histogram.count == 2


def test_metrics_writer_escapes_labels_and_parses() -> None:
    out = MetricsWriter()
    out.family("t_messages", "counter", "Messages.", [({"channel": 'we"ird\\na\nme'}, 3)])
    out.family("t_depth", "gauge", "Depth.", [({}, 1.5)])
    histogram = Histogram((1.0,))
    histogram.observe(0.5)
    out.histogram("t_seconds", "Durations.", [({"provider": "p"}, histogram)])
    families = {f.name: f for f in text_string_to_metric_families(out.render())}
    [sample] = families["t_messages"].samples
    assert sample.labels == {"channel": 'we"ird\\na\nme'} and sample.value == 3
    assert families["t_depth"].samples[0].value == 1.5
    buckets = [s for s in families["t_seconds"].samples if s.name == "t_seconds_bucket"]
    assert [(s.labels["le"], s.value) for s in buckets] == [("1.0", 1), ("+Inf", 1)]
