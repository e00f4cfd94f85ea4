"""Conversation history, against the file store and the Redis store: the same assertions."""

from __future__ import annotations

from tests.backends.agent_stores import AgentStores, redis_stores, stores

__all__ = ["redis_stores", "stores"]  # fixtures


def test_messages_come_back_in_order_with_their_metadata(stores: AgentStores) -> None:
    sessions = stores.sessions()
    assert sessions.last("telegram:42", 5) == [] and sessions.metadata("telegram:42") is None
    for n in range(6):
        sessions.append("telegram:42", {"role": "user" if n % 2 == 0 else "assistant",
                                        "content": f"message {n} — 안녕", "inbound_key": f"k{n}"})
    again = stores.sessions()  # a restart, or another node
    for store in (sessions, again):
        assert [m["content"] for m in store.last("telegram:42", 2)] == [
            "message 4 — 안녕", "message 5 — 안녕"]
        assert len(store.last("telegram:42", 100)) == 6
        assert store.last("telegram:42", 0) == []
        assert [m["inbound_key"] for m in store.range("telegram:42", 1, 3)] == ["k1", "k2"]
        assert [m["inbound_key"] for m in store.range("telegram:42", 4)] == ["k4", "k5"]
        assert store.range("telegram:42", 3, 3) == []
        first = store.last("telegram:42", 6)[0]
        assert first["role"] == "user" and first["at"] > 0
        meta = store.metadata("telegram:42")
        assert meta is not None and meta["_type"] == "metadata"
        assert meta["key"] == "telegram:42" and meta["created_at"] == first["at"]


def test_content_is_redacted_before_it_is_stored(stores: AgentStores) -> None:
    def redact(text: str) -> str:
        return text.replace("sk-live-123456", "[REDACTED]")

    stores.sessions(redact=redact).append("slack:C1:1700.1", {
        "role": "user", "content": "my key is sk-live-123456"})
    stored = stores.sessions().last("slack:C1:1700.1", 1)
    assert stored[0]["content"] == "my key is [REDACTED]"


def test_sessions_are_listed_most_recent_first(stores: AgentStores) -> None:
    sessions = stores.sessions()
    sessions.append("discord:1", {"role": "user", "content": "first"})
    sessions.append("local:web", {"role": "user", "content": "second"})
    sessions.append("discord:1", {"role": "assistant", "content": "third, a longer one"})
    listed = stores.sessions().list_sessions()
    assert [info.key for info in listed] == ["discord:1", "local:web"]
    assert listed[0].updated_at >= listed[1].updated_at
    assert listed[0].size_bytes > listed[1].size_bytes > 0


def test_a_limited_listing_is_the_latest_sessions(stores: AgentStores) -> None:
    sessions = stores.sessions()
    sessions.append("discord:1", {"role": "user", "content": "first"})
    sessions.append("local:web", {"role": "user", "content": "second"})
    sessions.append("discord:1", {"role": "assistant", "content": "third"})
    assert [info.key for info in sessions.list_sessions(limit=1)] == ["discord:1"]
    assert len(sessions.list_sessions(limit=20)) == 2
    assert sessions.list_sessions(limit=1)[0].size_bytes > 0


def test_another_node_reads_every_append_at_once(redis_stores: AgentStores) -> None:
    """No tail cache survives across calls: the node that holds the chat next reads what the
    previous holder wrote a moment ago (a file store caches the tail of the sessions it has
    open; one daemon owns its workspace, so it never needs to look again)."""
    node_a, node_b = redis_stores.sessions(), redis_stores.sessions()
    node_a.append("telegram:7", {"role": "user", "content": "hello"})
    assert [m["content"] for m in node_b.last("telegram:7", 5)] == ["hello"]
    node_b.append("telegram:7", {"role": "assistant", "content": "hi"})
    node_a.append("telegram:7", {"role": "user", "content": "again"})
    assert [m["content"] for m in node_b.last("telegram:7", 5)] == ["hello", "hi", "again"]
    assert [m["content"] for m in node_a.range("telegram:7", 1)] == ["hi", "again"]
