"""The agent's cron tool may name another chat only in a run an admin started, and may make
quiet `system_event` jobs; through the registry with a real CronService."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.tools.base import ChatRef, ToolContext, ToolServices
from soulflow.agent.tools.cron_tool import CronTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.cron import FileCronStore
from soulflow.cron import CronService, PayloadKind
from soulflow.cron.admin import ToolCronHandle

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
HOURLY = {"kind": "every", "every_s": 3600}


@pytest.fixture
def service(tmp_path: Path) -> CronService:
    return CronService(FileCronStore(tmp_path / "cron-store.json"), lambda job, when: None,
                       clock=lambda: NOW)


async def call(tmp_path: Path, service: CronService, *, admin: bool,
               **params: Any) -> tuple[str, str]:
    async def schedule() -> ToolCronHandle:
        return ToolCronHandle(service, admin, ["local", "telegram", "slack"])

    registry = ToolRegistry()
    registry.register(CronTool())
    ctx = ToolContext(tmp_path, ChatRef("telegram", "100", None, "u1"),
                      services=ToolServices(schedule=schedule))
    result = await registry.execute("cron", params, ctx)
    return result.status, result.output


async def test_only_an_admins_run_may_target_another_chat(tmp_path: Path,
                                                           service: CronService) -> None:
    status, output = await call(tmp_path, service, admin=False, action="add",
                                schedule=HOURLY, text="Post the report.", chat="slack:C9")
    assert status == "error" and "only an admin" in output
    assert await service.list_jobs() == []

    status, output = await call(tmp_path, service, admin=True, action="add",
                                schedule=HOURLY, text="Post the report.", chat="slack:C9")
    assert status == "ok" and " in slack:C9:" in output
    [job] = await service.list_jobs()
    assert job.chat.key == "slack:C9" and job.kind is PayloadKind.AGENT_TURN

    status, output = await call(tmp_path, service, admin=True, action="add",
                                schedule=HOURLY, text="x", chat="discord:1")
    assert status == "error" and "no 'discord' channel" in output


async def test_a_quiet_job_from_the_tool(tmp_path: Path, service: CronService) -> None:
    status, _ = await call(tmp_path, service, admin=False, action="add", schedule=HOURLY,
                           kind="system_event",
                           text="Check the build; answer HEARTBEAT_OK if it is green.")
    assert status == "ok"
    [job] = await service.list_jobs()
    assert job.kind is PayloadKind.SYSTEM_EVENT and job.chat.key == "telegram:100"
    stored = service.store.path.read_text()
    assert '"kind": "system_event"' in stored
    assert FileCronStore(service.store.path).get(job.id) == job  # survives a reload
