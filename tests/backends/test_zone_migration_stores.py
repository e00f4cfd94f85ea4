"""The trust-zones migration reads and marks sessions through the daemon's store, so it works
the same on the file backend and on Redis (where sessions are lists, not files)."""

from __future__ import annotations

from pathlib import Path

from soulflow.agent.consolidate import CONSOLIDATED_TYPE, consolidation_due
from soulflow.runtime.zone_migration import ZoneMigration, chat_dir_name
from soulflow.storage.beneath import Beneath
from tests.backends.agent_stores import AgentStores, redis_stores, stores

__all__ = ["redis_stores", "stores"]  # fixtures


def test_sessions_are_reset_and_attachments_claimed_on_either_store(
        stores: AgentStores, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    inbound = ws / "runtime" / "inbound-files" / "telegram"
    (inbound / chat_dir_name("-100")).mkdir(parents=True)
    (inbound / chat_dir_name("-100") / "G_g.png").write_bytes(b"group")
    (inbound / "A_a.pdf").write_bytes(b"alice")
    sessions = stores.sessions()
    for i in range(8):
        content = f"[attachment a.pdf saved at {inbound}/A_a.pdf]" if i == 0 else f"m{i}"
        sessions.append("telegram:111", {"role": "user", "content": content})
    sessions.append("telegram:111", {"_type": CONSOLIDATED_TYPE, "through": 2, "count": 8})
    sessions.append("telegram:-100", {"role": "user", "content": "hi"})
    report = ZoneMigration(Beneath(ws), sessions).run()
    assert (report.sessions_reset, report.files_to_chats) == (1, 2)
    assert (ws / "chats" / "telegram-111" / "files" / "A_a.pdf").read_bytes() == b"alice"
    assert (ws / "chats" / "telegram--100" / "files" / "G_g.png").read_bytes() == b"group"
    again = stores.sessions()  # a restart, or another node
    last = again.last("telegram:111", 1)[0]
    assert (last["_type"], last["through"], last["count"]) == (CONSOLIDATED_TYPE, -1, 8)
    assert consolidation_due(again, "telegram:111", 60, keep_last=2)
    assert ZoneMigration(Beneath(ws), again).run().already_done
    assert len([r for r in again.last("telegram:111", 20) if r.get("_type")]) == 2
