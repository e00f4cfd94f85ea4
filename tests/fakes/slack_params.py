"""Request decoding and error replies for the fake Slack Web API.

slack_sdk sends arguments in three ways depending on the method: JSON bodies
(``chat.postMessage``), URL query parameters (``reactions.add``, ``conversations.history``,
``files.getUploadURLExternal`` - it passes them as aiohttp ``params``) and form bodies. The
real API merges all of them, so the fake does too.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class SlackError(Exception):
    """An error reply: ``{"ok": false, "error": "<code>"}`` (HTTP 200 unless rate limited)."""

    def __init__(
        self,
        error: str,
        *,
        status: int = 200,
        retry_after: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.retry_after = retry_after
        self.extra = extra or {}

    def response(self) -> web.Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        body = {"ok": False, "error": self.error, **self.extra}
        return web.json_response(body, status=self.status, headers=headers)


class Params:
    """Merged call arguments with lenient typed accessors (Slack accepts "1"/"true"...)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.values.get(name)
        return default if value is None or value == "" else str(value)

    def require(self, name: str, error: str = "invalid_arguments") -> str:
        value = self.text(name)
        if value is None:
            raise SlackError(error)
        return value

    def integer(self, name: str, default: int) -> int:
        value = self.values.get(name)
        if value in (None, ""):
            return default
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise SlackError("invalid_arguments") from exc

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        return value is True or str(value).lower() in ("1", "true")

    def json(self, name: str, error: str = "invalid_arguments") -> Any:
        """A JSON-typed argument, given either as a JSON value or as a JSON string."""
        value = self.values.get(name)
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise SlackError(error) from exc
        return value


async def read_params(request: web.Request) -> Params:
    """Merge query string and JSON / urlencoded / multipart body (files are skipped)."""
    values: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json" and request.can_read_body:
        try:
            body = await request.json()
        except ValueError as exc:
            raise SlackError("invalid_json") from exc
        if isinstance(body, dict):
            values.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        values.update({k: v for k, v in form.items() if isinstance(v, str)})
    return Params(values)


def bearer_token(request: web.Request, params: Params) -> str | None:
    """Token from ``Authorization: Bearer`` or, like the real API, a ``token`` argument."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return params.text("token")
