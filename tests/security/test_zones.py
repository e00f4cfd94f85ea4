"""Which zone a path is in, and which chat zone a run works in."""

from __future__ import annotations

from pathlib import PurePosixPath

from soulflow.contracts import QUIET_TURN_ORIGIN, ChatRef
from soulflow.security.zones import Zone, zone_for, zone_named, zone_of_path


def test_a_chat_zone_is_named_after_its_chat_and_shared_by_its_threads() -> None:
    assert zone_for(ChatRef("telegram", "-100123")).name == "telegram--100123"
    assert zone_for(ChatRef("slack", "C01", "1700.1")) == zone_for(ChatRef("slack", "C01"))
    assert zone_for(ChatRef("telegram", "42")) != zone_for(ChatRef("telegram", "43"))


def test_unsafe_chat_ids_become_distinct_safe_names() -> None:
    a, b = zone_named("local", "a/b"), zone_named("local", "a_b")
    assert a != b and "/" not in a.name and not a.name.startswith(".")
    assert zone_named("local", "../../etc").name.count("/") == 0
    assert len(zone_named("local", "x" * 500).name) <= 80


def test_runs_nobody_typed_have_zones_of_their_own() -> None:
    heartbeat = ChatRef("telegram", "42", session_key="heartbeat", origin=QUIET_TURN_ORIGIN)
    cron = ChatRef("telegram", "42", session_key="cron:job1", origin=QUIET_TURN_ORIGIN)
    person = ChatRef("telegram", "42")
    assert len({zone_for(heartbeat), zone_for(cron), zone_for(person)}) == 3


def test_paths_are_sorted_into_zones() -> None:
    assert zone_of_path(PurePosixPath("templates/AGENTS.md")) == (Zone.OPERATOR, None)
    assert zone_of_path(PurePosixPath("runtime/bus/x")) == (Zone.DAEMON, None)
    assert zone_of_path(PurePosixPath("Runtime")) == (Zone.DAEMON, None)
    assert zone_of_path(PurePosixPath("chats")) == (Zone.DAEMON, None)
    assert zone_of_path(PurePosixPath("chats/telegram-1/files/a")) == (Zone.CHAT, "telegram-1")
    assert zone_for(ChatRef("telegram", "1")).contains(PurePosixPath("chats/telegram-1/x"))
