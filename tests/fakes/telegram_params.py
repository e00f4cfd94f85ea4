"""Decoding Bot API request parameters the way the real server accepts them.

Telegram takes parameters from the query string, ``application/json``,
``application/x-www-form-urlencoded`` or ``multipart/form-data``. python-telegram-bot
sends form/multipart where every non-string value is JSON-encoded (``chat_id=123``,
``reply_parameters={"message_id": 5}``), so values are decoded by parameter type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: Parameters whose value is a JSON object/array when sent as a form field.
JSON_PARAMS = frozenset(
    {
        "reply_parameters", "reply_markup", "allowed_updates", "reaction", "entities",
        "caption_entities", "commands", "scope", "link_preview_options", "media",
    }
)  # fmt: skip
INT_PARAMS = frozenset(
    {
        "chat_id", "message_id", "offset", "limit", "reply_to_message_id",
        "message_thread_id", "user_id", "from_chat_id",
    }
)  # fmt: skip
FLOAT_PARAMS = frozenset({"timeout"})
BOOL_PARAMS = frozenset(
    {
        "disable_notification", "protect_content", "is_big", "drop_pending_updates",
        "allow_sending_without_reply", "disable_web_page_preview", "has_spoiler",
    }
)  # fmt: skip


class ApiError(Exception):
    """An error reply in Telegram's format: ``{"ok": false, "error_code", "description"}``."""

    def __init__(
        self, status: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.parameters:
            body["parameters"] = self.parameters
        return body


def bad_request(reason: str) -> ApiError:
    return ApiError(400, f"Bad Request: {reason}")


@dataclass
class Upload:
    """A file part of a multipart request."""

    field: str
    filename: str
    content_type: str
    data: bytes


def _decode(name: str, value: Any) -> Any:
    """Best-effort typed value; undecodable input is kept so handlers can reject it."""
    if not isinstance(value, str):
        return value
    try:
        if name in JSON_PARAMS:
            return json.loads(value)
        if name in INT_PARAMS:
            return int(value)
        if name in FLOAT_PARAMS:
            return float(value)
    except ValueError:
        return value
    if name in BOOL_PARAMS:
        return value.lower() in ("true", "1")
    return value


class Params:
    """Decoded parameters of one call with typed accessors that raise Bot API errors."""

    def __init__(self, values: dict[str, Any], files: dict[str, Upload]) -> None:
        self.values = {name: _decode(name, value) for name, value in values.items()}
        self.files = files

    def record(self) -> dict[str, Any]:
        """Parameters as logged in ``FakeTelegram.requests`` (uploads included)."""
        return {**self.values, **self.files}

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def integer(self, name: str, *, required: bool = False) -> int | None:
        value = self.values.get(name)
        if value is None:
            if required:
                raise bad_request(f"{name} is empty")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request(f"invalid {name} specified")
        return value

    def number(self, name: str, default: float) -> float:
        value = self.values.get(name, default)
        if not isinstance(value, int | float):
            raise bad_request(f"invalid {name} specified")
        return float(value)

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        return None if value is None else str(value)

    def obj(self, name: str) -> Any:
        value = self.values.get(name)
        if isinstance(value, str):
            raise bad_request(f"can't parse {name.replace('_', ' ')} JSON object")
        return value

    def flag(self, name: str) -> bool:
        return bool(self.values.get(name, False))

    def upload(self, name: str) -> Upload | str | None:
        """The file given for ``name``: a multipart part, ``attach://`` part or a file_id."""
        if name in self.files:
            return self.files[name]
        value = self.values.get(name)
        if isinstance(value, str) and value.startswith("attach://"):
            part = self.files.get(value.removeprefix("attach://"))
            if part is None:
                raise bad_request(f"file {value} not found in the request")
            return part
        return value


async def read_params(request: web.Request) -> Params:
    """Merge query string and body (JSON, urlencoded or multipart) into :class:`Params`."""
    values: dict[str, Any] = dict(request.query)
    files: dict[str, Upload] = {}
    if request.content_type == "application/json" and request.can_read_body:
        try:
            body = await request.json()
        except ValueError as exc:
            raise bad_request("can't parse JSON request body") from exc
        if not isinstance(body, dict):
            raise bad_request("JSON request body must be an object")
        values.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        for name, value in form.items():
            if isinstance(value, web.FileField):
                data = value.file.read()
                files[name] = Upload(name, value.filename, value.content_type, data)
            else:
                values[name] = value
    return Params(values, files)
