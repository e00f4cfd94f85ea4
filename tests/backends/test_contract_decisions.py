"""Decisions, the same assertions against the file and the Redis store: canonical keys, the
priority rule, dedupe, and the rule holding when writers race (threads on the file store, one
client per writer on Redis, as several nodes would be)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.redis.decisions import RedisDecisionStore
from soulflow.decision.service import DecisionService
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import node_states


@dataclass
class Decisions:
    open: Callable[[], DecisionService]  # another service over the same state
    seed: Callable[[dict[str, dict[str, object]]], None]  # entries written by hand


@pytest.fixture(params=["file", "redis"])
def decisions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Decisions]:
    path = tmp_path / "decisions" / "index.json"
    if request.param == "file":
        def seed_file(entries: dict[str, dict[str, object]]) -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"version": 1, "decisions": entries}))

        yield Decisions(lambda: DecisionService(FileDecisionStore(path)), seed_file)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with node_states(server.url) as open_state:

        def seed_redis(entries: dict[str, dict[str, object]]) -> None:
            state = open_state()
            state.client.hset(f"{state.prefix}decisions",
                              mapping={k: json.dumps(v) for k, v in entries.items()})

        yield Decisions(lambda: DecisionService(RedisDecisionStore(open_state())),
                        seed_redis)


def test_canonical_keys_and_the_priority_rule(decisions: Decisions) -> None:
    service = decisions.open()
    first = service.set("Reply Language", "Korean", priority=1)
    assert first.key == "reply_language"
    assert service.set("reply-language", "English", priority=0).value == "Korean"
    again = service.set("REPLY language", "Korean", priority=1)
    assert again.updated_at == first.updated_at  # a repeat does not refresh it
    assert service.set("reply_language", "English", priority=2).value == "English"
    service.set("deploy window", "Friday ☕")
    other = decisions.open()
    assert [d.key for d in other.list()] == ["reply_language", "deploy_window"]
    assert other.get("Reply Language").value == "English"  # type: ignore[union-attr]
    assert "- deploy_window: Friday ☕" in other.compact_text()
    assert other.remove("Deploy Window") and not other.remove("deploy window")
    assert decisions.open().get("deploy window") is None
    with pytest.raises(ValueError):
        service.set("  --  ", "x")


def test_dedupe_merges_keys_written_before_they_were_canonical(decisions: Decisions) -> None:
    decisions.seed({
        "Reply Language": {"value": "Korean", "priority": 1, "updated_at": 10.0},
        "reply-language": {"value": "English", "priority": 1, "updated_at": 20.0},
        "reply_language": {"value": "French", "priority": 0, "updated_at": 30.0},
        "--": {"value": "nothing", "priority": 5, "updated_at": 1.0},
        "deploy_window": {"value": "Friday", "priority": 0, "updated_at": 5.0},
    })
    service = decisions.open()
    assert service.dedupe() == 3
    assert service.dedupe() == 0
    merged = {d.key: d.value for d in decisions.open().list()}
    assert merged == {"reply_language": "English", "deploy_window": "Friday"}


def test_the_priority_rule_holds_when_writers_race(decisions: Decisions) -> None:
    services = [decisions.open() for _ in range(6)]
    shared = services[0] if isinstance(services[0].records, FileDecisionStore) else None
    start = threading.Barrier(len(services))

    def write(priority: int) -> None:
        service = shared or services[priority]
        start.wait()
        for round_ in range(20):
            service.set("on call", f"p{priority} r{round_}", priority=priority)

    threads = [threading.Thread(target=write, args=(p,)) for p in range(len(services))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = (shared or decisions.open()).get("on call")
    assert final is not None and final.priority == 5 and final.value.startswith("p5 ")
