"""The cron tool through the registry, with a real CronService on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.tools.base import ChatRef, ToolContext, ToolServices
from soulflow.agent.tools.cron_tool import CronTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.cron import FileCronStore
from soulflow.cron import CronService

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def service(tmp_path: Path) -> CronService:
    store = FileCronStore(tmp_path / "cron" / "cron-store.json")
    return CronService(store, lambda job, when: None, clock=lambda: NOW, max_jobs_per_chat=2)


@pytest.fixture
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(CronTool())
    return registry


def context(workspace: Path, service: CronService | None, chat_id: str = "c1",
            thread_id: str | None = None) -> ToolContext:
    async def schedule() -> CronService:
        assert service is not None
        return service

    services = ToolServices(schedule=schedule if service is not None else None)
    return ToolContext(workspace, ChatRef("telegram", chat_id, thread_id, "u1"),
                       services=services)


async def call(registry: ToolRegistry, ctx: ToolContext, **params: Any) -> tuple[str, str]:
    result = await registry.execute("cron", params, ctx)
    return result.status, result.output


EVERY_HOUR = {"kind": "every", "every_s": 3600}


async def test_add_list_remove(registry: ToolRegistry, service: CronService,
                               workspace: Path) -> None:
    ctx = context(workspace, service, thread_id="t7")
    status, output = await call(registry, ctx, action="add", name="plants",
                                schedule=EVERY_HOUR, text="Remind the user to water the plants.")
    assert status == "ok"  # no approval needed
    [job] = await service.list_jobs()
    assert output == (f"scheduled cron job {job.id} (plants): every 1h (UTC); "
                      "next run 2024-01-01T13:00:00+00:00")
    assert (job.chat.provider, job.chat.chat_id, job.chat.thread_id) == ("telegram", "c1", "t7")
    assert job.text == "Remind the user to water the plants."

    status, output = await call(registry, ctx, action="list")
    assert status == "ok"
    assert output.splitlines() == [
        "1 cron job(s) in this chat:",
        f"- {job.id} | plants | every 1h (UTC) | next run 2024-01-01T13:00:00+00:00"]

    assert await call(registry, ctx, action="remove", job_id=job.id) == (
        "ok", f"removed cron job {job.id} (plants)")
    assert await call(registry, ctx, action="list") == ("ok", "no cron jobs in this chat")


async def test_other_chats_jobs_are_invisible(registry: ToolRegistry, service: CronService,
                                              workspace: Path) -> None:
    mine = context(workspace, service)
    await call(registry, mine, action="add", schedule=EVERY_HOUR, text="ping")
    [job] = await service.list_jobs()
    theirs = context(workspace, service, chat_id="c2")
    assert await call(registry, theirs, action="list") == ("ok", "no cron jobs in this chat")
    status, output = await call(registry, theirs, action="remove", job_id=job.id)
    assert status == "error" and f"there is no cron job '{job.id}' in this chat" in output
    assert await service.list_jobs() == [job]


async def test_enable_disable(registry: ToolRegistry, service: CronService,
                              workspace: Path) -> None:
    ctx = context(workspace, service)
    await call(registry, ctx, action="add", name="n", schedule=EVERY_HOUR, text="ping")
    [job] = await service.list_jobs()
    assert await call(registry, ctx, action="disable", job_id=job.id) == (
        "ok", f"disabled cron job {job.id} (n)")
    _, listing = await call(registry, ctx, action="list")
    assert listing.endswith("| disabled")
    status, output = await call(registry, ctx, action="enable", job_id=job.id)
    assert status == "ok" and "next run 2024-01-01T13:00:00+00:00" in output
    status, output = await call(registry, ctx, action="enable")
    assert status == "error" and "needs job_id" in output


@pytest.mark.parametrize(("params", "message"), [
    ({"schedule": EVERY_HOUR}, "needs both schedule and text"),
    ({"schedule": EVERY_HOUR, "text": "/secret list"}, "must not start with '/'"),
    ({"schedule": {"kind": "cron", "expr": "* * *"}, "text": "x"}, "has 3 field(s)"),
    ({"schedule": {"kind": "every", "every_s": 5}, "text": "x"}, "5 is less than the minimum"),
    ({"schedule": {"kind": "at", "at": "2023-05-01T10:00:00Z"}, "text": "x"}, "in the past"),
    ({"schedule": {"kind": "every", "every_s": 60, "tz": "Nowhere"}, "text": "x"},
     "unknown time zone"),
])
async def test_add_refusals(registry: ToolRegistry, service: CronService, workspace: Path,
                            params: dict[str, Any], message: str) -> None:
    status, output = await call(registry, context(workspace, service), action="add", **params)
    assert status == "error" and message in output
    assert await service.list_jobs() == []


async def test_per_chat_limit(registry: ToolRegistry, service: CronService,
                              workspace: Path) -> None:
    ctx = context(workspace, service)
    for _ in range(2):
        assert (await call(registry, ctx, action="add", schedule=EVERY_HOUR, text="x"))[0] == "ok"
    status, output = await call(registry, ctx, action="add", schedule=EVERY_HOUR, text="x")
    assert status == "error" and "already has 2 cron jobs" in output


async def test_without_the_scheduler_service(registry: ToolRegistry, workspace: Path) -> None:
    status, output = await call(registry, context(workspace, None), action="list")
    assert status == "error" and "the scheduler service is not available here" in output
