"""The chat folders' disk quotas (`security.quota`): the check the file tools make before a
write, an exec call's budget and its settling, and the persisted usage index."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.config import load_settings
from soulflow.security.quota import (
    MB,
    QuotaExceeded,
    QuotaLimits,
    UsageIndex,
    ZoneQuotas,
)
from soulflow.security.zones import zone_named
from soulflow.storage.tree_usage import Usage

ZONE = zone_named("telegram", "42")
LIMITS = QuotaLimits(chat_bytes=1000, chat_files=5, exec_bytes=400, exec_files=3)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_limits_come_from_the_settings(workspace: Path) -> None:
    settings = load_settings(workspace, environ={"CHAT_DISK_QUOTA_MB": "3",
                                                 "EXEC_DISK_QUOTA_FILES": "77"})
    limits = QuotaLimits.from_settings(settings)
    assert limits == QuotaLimits(chat_bytes=3 * MB, chat_files=20000, exec_bytes=128 * MB,
                                 exec_files=77)
    assert QuotaLimits.defaults() == QuotaLimits.from_settings(load_settings(workspace, {}))


def test_check_write_refuses_a_write_over_the_chat_quota(workspace: Path) -> None:
    quotas = ZoneQuotas(LIMITS)
    home = ZONE.path(workspace)
    home.mkdir(parents=True)
    (home / "notes.txt").write_bytes(b"x" * 900)
    quotas.check_write(workspace, ZONE, added_bytes=100, added_files=1)  # exactly full
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_write(workspace, ZONE, added_bytes=101, added_files=1)
    assert str(refused.value) == (
        "chats/telegram-42/ would hold 1,001 bytes, over this chat's disk quota of 1,000 bytes "
        "(CHAT_DISK_QUOTA_MB); delete something there first")
    quotas.check_write(workspace, ZONE, added_bytes=-500, added_files=0)  # shrinking: fine
    for i in range(4):
        (home / f"f{i}").touch()
    with pytest.raises(QuotaExceeded, match="CHAT_DISK_QUOTA_FILES"):
        quotas.check_write(workspace, ZONE, added_bytes=0, added_files=1)


def test_check_write_records_the_usage_it_allows(workspace: Path) -> None:
    quotas = ZoneQuotas(LIMITS)
    quotas.check_write(workspace, ZONE, added_bytes=10, added_files=2)  # no folder yet
    usage = quotas.index.get(ZONE.name)
    assert usage is not None and (usage.bytes, usage.files) == (10, 2)


def test_an_exec_budget_is_what_is_left_of_both_quotas(workspace: Path) -> None:
    quotas = ZoneQuotas(LIMITS)
    budget = quotas.begin_exec(workspace, ZONE)  # makes the folder
    try:
        assert ZONE.path(workspace).is_dir()
        assert (budget.allowed.bytes, budget.allowed.files) == (400, 3)
        assert budget.file_size_limit == 401
    finally:
        budget.close()
    (ZONE.path(workspace) / "big").write_bytes(b"x" * 700)
    budget = quotas.begin_exec(workspace, ZONE)
    try:
        assert (budget.allowed.bytes, budget.allowed.files) == (300, 3)
    finally:
        budget.close()


def test_settling_undoes_a_call_over_its_budget(workspace: Path) -> None:
    quotas = ZoneQuotas(LIMITS)
    home = ZONE.path(workspace)
    home.mkdir(parents=True)
    (home / "mine").write_text("kept")
    budget = quotas.begin_exec(workspace, ZONE)
    try:
        (home / "a").write_bytes(b"x" * 300)
        assert budget.check() is None
        (home / "b").write_bytes(b"x" * 300)
        assert budget.check() == (
            "it wrote 600 bytes, over the per-call quota of 400 bytes (EXEC_DISK_QUOTA_MB)")
        outcome = budget.settle()
    finally:
        budget.close()
    assert outcome.reason is not None and outcome.undone is not None
    assert sorted(p.name for p in home.iterdir()) == ["mine"]
    usage = quotas.index.get(ZONE.name)
    assert usage is not None and (usage.bytes, usage.files) == (4, 1)


def test_a_private_tmp_counts_against_the_call(workspace: Path) -> None:
    quotas = ZoneQuotas(LIMITS)
    budget = quotas.begin_exec(workspace, ZONE)
    try:
        (ZONE.path(workspace) / "a").write_bytes(b"x" * 300)
        assert budget.check(Usage(200, 1)) is not None
        assert budget.check(Usage(50, 1)) is None
    finally:
        budget.close()


def test_a_folder_that_cannot_be_snapshotted_refuses_the_call(workspace: Path) -> None:
    deep = ZONE.path(workspace)
    for _ in range(300):
        deep = deep / "d"
    deep.mkdir(parents=True)
    with pytest.raises(QuotaExceeded, match="nested deeper than 256 levels"):
        ZoneQuotas(LIMITS).begin_exec(workspace, ZONE)


def test_the_usage_index_survives_a_restart_and_summarises(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "quota" / "usage.json"
    index = UsageIndex(path)
    quotas = ZoneQuotas(LIMITS, index)
    index.put("telegram-1", Usage(10, 1))
    index.put("slack-C2", Usage(5000, 7))
    index.put("telegram-1", Usage(20, 2))
    index.close()
    again = ZoneQuotas(LIMITS, UsageIndex(path))
    summary = again.summary(largest=1)
    assert summary["chats"] == 2 and summary["bytes"] == 5020 and summary["files"] == 9
    assert summary["quota"] == LIMITS.as_dict()
    assert [row["zone"] for row in summary["largest"]] == ["slack-C2"]
    assert quotas.summary()["largest"][1]["bytes"] == 20


def test_a_damaged_index_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text("{not json")
    assert UsageIndex(path).all() == []
