"""The operator's MCP configuration: the workspace file ``mcp.json``, parsed and checked.

The file is the common ``mcpServers`` shape, so a config written for another client works::

    {"mcpServers": {
       "files": {"command": "npx", "args": ["-y", "@scope/server"], "env": {"K": "v"},
                 "network": false, "autoApprove": ["read"]},
       "remote": {"url": "https://host/mcp", "headers": {"Authorization": "{{secret:TOK}}"}}}}

It lives in the operator zone (`soulflow.security.zones`): the file tools write it only with
an admin's approval and the sandbox sees it read-only, because whoever writes it chooses
which programs the daemon starts. Everything here is checked up front and a problem is one
`McpConfigError` naming the server and the key, so a bad file is a clear line in the log,
``soulflow status`` and ``soulflow doctor`` and never stops the daemon.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from soulflow.agent.errors import AgentError
from soulflow.security.zones import MCP_CONFIG_FILE
from soulflow.storage.beneath import Beneath

CONFIG_FILE = MCP_CONFIG_FILE
MAX_CONFIG_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0
DEFAULT_MEMORY_MB = 4096
# a server's name is part of its tools' names (mcp__<server>__<tool>, at most 64 characters)
_SERVER_NAME = re.compile(r"[A-Za-z0-9-]{1,24}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_STDIO_KEYS = {"command", "args", "env", "network", "autoApprove", "timeoutS", "memoryMb",
               "disabled", "description", "type"}
_HTTP_KEYS = {"url", "headers", "autoApprove", "timeoutS", "disabled", "description", "type"}


class McpConfigError(AgentError):
    """``mcp.json`` cannot be used; ``str()`` says where and why, for the operator."""


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One server as configured. ``env`` and ``headers`` values may hold ``{{secret:NAME}}``
    references, resolved from the vault only when the server starts."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    network: bool = False
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    auto_approve: frozenset[str] = frozenset()
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB

    def describe(self) -> dict[str, Any]:
        """What `/api/state` shows: never an env or header value (they may be secrets)."""
        where = self.url if self.transport is Transport.HTTP else \
            " ".join([self.command, *self.args])
        return {"transport": self.transport.value, "target": where[:200],
                "network": self.network if self.transport is Transport.STDIO else True,
                "sandboxed": self.transport is Transport.STDIO,
                "auto_approve": sorted(self.auto_approve), "timeout_s": self.timeout_s}


@dataclass(frozen=True, slots=True)
class McpConfig:
    """Every enabled server of ``mcp.json`` (none when the file does not exist)."""

    servers: tuple[ServerConfig, ...] = ()
    disabled: tuple[str, ...] = ()


def load_config(workspace: Path) -> McpConfig:
    """Read and check ``mcp.json`` at the workspace root (opened without following links).
    No file is no servers; anything else wrong raises `McpConfigError`."""
    try:
        raw = Beneath(workspace).read_bytes(CONFIG_FILE, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return McpConfig()
    except OSError as exc:
        raise McpConfigError(f"{CONFIG_FILE} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise McpConfigError(f"{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise McpConfigError(f"{CONFIG_FILE} is not valid JSON: {exc}") from None
    return parse_config(data)


def parse_config(data: object) -> McpConfig:
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError(f'{CONFIG_FILE} must be an object with "mcpServers": {{...}}')
    servers: list[ServerConfig] = []
    disabled: list[str] = []
    for name, entry in data["mcpServers"].items():
        if not _SERVER_NAME.fullmatch(name):
            raise McpConfigError(f"{CONFIG_FILE}: server name {name[:40]!r} must be 1-24 of "
                                 "letters, digits and '-' (it becomes part of tool names)")
        if not isinstance(entry, dict):
            raise McpConfigError(f"{CONFIG_FILE}: server {name!r} must be an object")
        if entry.get("disabled") is True:
            disabled.append(name)
            continue
        servers.append(_server(name, entry))
    return McpConfig(tuple(servers), tuple(disabled))


def _server(name: str, entry: dict[str, Any]) -> ServerConfig:
    where = f"{CONFIG_FILE}: server {name!r}"
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(f'{where} needs exactly one of "command" (stdio) or "url" '
                             "(streamable HTTP)")
    transport = Transport.STDIO if has_command else Transport.HTTP
    allowed = _STDIO_KEYS if has_command else _HTTP_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise McpConfigError(f"{where}: unknown key(s) {', '.join(unknown)} for a "
                             f"{transport.value} server (allowed: {', '.join(sorted(allowed))})")
    auto = entry.get("autoApprove", [])
    if not isinstance(auto, list) or not all(isinstance(t, str) for t in auto):
        raise McpConfigError(f'{where}: "autoApprove" must be a list of tool names')
    timeout = entry.get("timeoutS", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not 0 < timeout <= MAX_TIMEOUT_S:
        raise McpConfigError(f'{where}: "timeoutS" must be a number of seconds in '
                             f"(0, {MAX_TIMEOUT_S:g}]")
    common = {"name": name, "transport": transport, "auto_approve": frozenset(auto),
              "timeout_s": float(timeout)}
    if transport is Transport.HTTP:
        url = entry["url"]
        if not isinstance(url, str) or not re.match(r"https?://[^\s/]+", url):
            raise McpConfigError(f'{where}: "url" must be an http:// or https:// URL')
        return ServerConfig(url=url, headers=_strings(entry.get("headers", {}), where,
                                                      "headers", _HEADER_NAME), **common)
    command, args = entry["command"], entry.get("args", [])
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise McpConfigError(f'{where}: "command" must be a program name or path')
    if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a
                                             for a in args):
        raise McpConfigError(f'{where}: "args" must be a list of strings')
    network = entry.get("network", False)
    if not isinstance(network, bool):
        raise McpConfigError(f'{where}: "network" must be true or false')
    memory = entry.get("memoryMb", DEFAULT_MEMORY_MB)
    if isinstance(memory, bool) or not isinstance(memory, int) or not 64 <= memory <= 65536:
        raise McpConfigError(f'{where}: "memoryMb" must be a whole number from 64 to 65536')
    return ServerConfig(command=command, args=tuple(args), network=network, memory_mb=memory,
                        env=_strings(entry.get("env", {}), where, "env", _ENV_NAME), **common)


def _strings(value: object, where: str, key: str, names: re.Pattern[str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise McpConfigError(f'{where}: "{key}" must be an object of strings')
    for name, item in value.items():
        if not names.fullmatch(name):
            raise McpConfigError(f'{where}: "{key}" has an invalid name {name[:40]!r}')
        if not isinstance(item, str) or "\0" in item or (key == "headers" and (
                "\r" in item or "\n" in item)):
            raise McpConfigError(f'{where}: "{key}.{name}" must be a string')
    return dict(value)
