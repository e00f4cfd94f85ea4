"""The daemon's cron endpoints, mounted by the dashboard service under its API guard.

`GET /api/cron` lists jobs (`?chat=provider:chat_id` narrows to one chat);
`POST /api/cron/{add,rm,run,enable,disable}` take a JSON object (see `admin.py`). The
dashboard's middlewares apply first: Host/Origin/Sec-Fetch-Site rules, the token, and a
JSON-object body for every POST, so a web page in the operator's browser cannot schedule
anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from aiohttp import web

from soulflow.cron.admin import ACTIONS, CronRequestError, apply_action, list_jobs
from soulflow.cron.service import CronService

__all__ = ["cron_routes"]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


def cron_routes(service: CronService,
                channels: Callable[[], Collection[str]]) -> list[web.RouteDef]:
    """Routes for `DashboardService(routes=...)`; `channels()` names the running channels."""

    async def list_handler(request: web.Request) -> web.Response:
        return web.json_response(await list_jobs(service, request.query.get("chat")))

    async def action_handler(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in ACTIONS:
            return _error(404, f"unknown cron action {action!r}; use one of "
                               f"{', '.join(ACTIONS)}")
        try:
            body: Any = json.loads(await request.read() or b"{}")
        except ValueError:
            return _error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        try:
            return web.json_response(await apply_action(service, action, body, channels()))
        except CronRequestError as exc:
            return _error(exc.status, str(exc))

    return [web.get("/api/cron", list_handler),
            web.post("/api/cron/{action}", action_handler)]
