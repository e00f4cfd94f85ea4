"""Talk to the running daemon of a workspace over its HTTP API (used by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from soulflow.cli.errors import UserError
from soulflow.config import Settings


def reachable_url(url: str) -> str:
    """The daemon's URL as this machine should call it: a daemon bound to every address
    (0.0.0.0, ::) is called on loopback, so the Host header is a loopback name the dashboard
    accepts (it refuses unknown Host names: DNS rebinding protection)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host in ("0.0.0.0", "::") and parts.port is not None:
        loopback = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
        return urlunsplit((parts.scheme, f"{loopback}:{parts.port}", parts.path, "", ""))
    return url


class DaemonNotRunning(UserError):
    """No daemon holds the workspace, or its API cannot be reached."""


@dataclass(slots=True)
class DaemonClient:
    base_url: str
    token: str
    timeout_s: float = 10.0

    @classmethod
    def locate(cls, settings: Settings) -> DaemonClient | None:
        """The client for the workspace's running daemon, or None when none runs."""
        from soulflow.runtime import read_daemon_info

        info = read_daemon_info(settings)
        if info is None:
            return None
        url = info.get("url")
        if not url:
            raise DaemonNotRunning(
                f"the daemon in {settings.workspace} (pid {info.get('pid', '?')}) is still "
                "starting or runs without its dashboard (DASHBOARD_ENABLED=false); its HTTP API "
                "is needed for this command")
        return cls(reachable_url(url), settings["DASHBOARD_TOKEN"])

    @classmethod
    def connect(cls, settings: Settings) -> DaemonClient:
        client = cls.locate(settings)
        if client is None:
            raise DaemonNotRunning(f"SoulFlow is not running in {settings.workspace}; start it "
                                   "with `soulflow run`")
        return client

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        """One call; anything but a GET carries a JSON object body, `{}` at least (the API
        refuses a state-changing request without one: 415/400)."""
        if method.upper() not in ("GET", "HEAD") and json is None:
            json = {}
        try:
            response = httpx.request(method, self.base_url + path, json=json,
                                     headers=self.headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise DaemonNotRunning(f"cannot reach the daemon at {self.base_url}: {exc}") from None
        return self._decode(response)

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def post(self, path: str, json: Any = None) -> dict[str, Any]:
        return self.request("POST", path, json)

    @staticmethod
    def _decode(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code >= 400:
            reason = body.get("error") if isinstance(body, dict) else None
            raise DaemonNotRunning(
                f"the daemon answered {response.status_code}: {reason or response.text[:200]}")
        return body
