"""Who may call the daemon's HTTP API: the dashboard's own page and the CLI, never another site.

A browser lets any web page the operator has open send requests to `127.0.0.1`. Three rules
make that useless to an attacker, whatever the token setting:

- **Host.** A DNS-rebinding page gets its own name (`evil.example`) to resolve to 127.0.0.1,
  then reads the API as "same origin". The Host header still carries the attacker's name, so
  only the bound address, a loopback name (with the bound port) or a name the operator
  listed in DASHBOARD_ALLOWED_HOSTS is served.
- **Origin / Sec-Fetch-Site.** A page of another origin may send a request without being
  able to read the answer; that is enough to post a chat message. A request whose `Origin`
  is not the dashboard's own, or that the browser labels `Sec-Fetch-Site: cross-site` or
  `same-site` (another port on localhost is another site's page too), is refused.
- **JSON only.** An HTML form can send `text/plain`, urlencoded or multipart bodies across
  sites without asking; `application/json` needs a CORS preflight, which this server never
  approves (it sends no `Access-Control-Allow-*` header at all). State-changing requests
  must be `application/json` and parse as a JSON object.

The CLI sends neither Origin nor Sec-Fetch-Site and talks to the address the daemon wrote in
`runtime/daemon.json`, so it passes all three.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from soulflow.dashboard.errors import DashboardError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: `none`: the user typed the URL or opened a bookmark; `same-origin`: the dashboard's page
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Refused(DashboardError):
    """A request the API will not serve: `status` and a one-sentence reason for the caller."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HostName:
    """A host as a Host header or DASHBOARD_ALLOWED_HOSTS entry names it (lower case, IPv6
    without brackets); `port` None when none was written."""

    name: str
    port: int | None = None

    @classmethod
    def parse(cls, value: str) -> HostName | None:
        """`localhost:3789`, `[::1]:3789`, `dash.example` → HostName; None if malformed."""
        value = value.strip()
        if not value or any(c.isspace() or c in "/@?#\\" for c in value):
            return None
        try:
            parts = urlsplit("//" + value)
            port = parts.port
        except ValueError:
            return None
        if not parts.hostname:
            return None
        return cls(parts.hostname.lower(), port)

    def __str__(self) -> str:
        name = f"[{self.name}]" if ":" in self.name else self.name
        return name if self.port is None else f"{name}:{self.port}"


#: the page's own files under /static/ (a fixed list: the server opens no path it is sent)
STATIC_ASSETS = ("app.css", "app.js", "api.js", "chart.js", "events.js", "render.js",
                 "strip.js", "usage.js")
#: the only paths served to anyone: the page, its files and the liveness probe hold no data
OPEN_PATHS = frozenset({"/", "/healthz", *(f"/static/{name}" for name in STATIC_ASSETS)})


def is_guarded(path: str) -> bool:
    """Every path but the page, its files and /healthz: the API, /metrics, and any route
    added later, without anyone having to remember this rule."""
    return path not in OPEN_PATHS


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """The Host/Origin/content-type rules for one dashboard (its bound address and names)."""

    bound_host: str
    allowed_hosts: tuple[HostName, ...] = ()

    @classmethod
    def build(cls, bound_host: str, allowed: Iterable[str]) -> RequestPolicy:
        names = []
        for entry in allowed:
            parsed = HostName.parse(entry)
            if parsed is None:
                raise ValueError(f"DASHBOARD_ALLOWED_HOSTS entry {entry[:80]!r} is not a host "
                                 "name with an optional :port")
            names.append(parsed)
        bound = HostName.parse(bound_host)
        return cls(bound.name if bound is not None else bound_host.lower(), tuple(names))

    def host_allowed(self, host: HostName, bound_port: int) -> bool:
        """Loopback names and the bound address need the bound port (none written means 80);
        an operator-listed name needs its listed port, or any port when it lists none (a
        reverse proxy on 443, say)."""
        if any(entry.name == host.name and entry.port in (None, host.port)
               for entry in self.allowed_hosts):
            return True  # e.g. `localhost:8080`, an SSH tunnel's local end
        if host.name in LOOPBACK_NAMES or host.name == self.bound_host:
            return host.port == bound_port or (host.port is None and bound_port == 80)
        return False

    def check_source(self, headers: Any, bound_port: int) -> HostName:
        """The request's Host, if it may be served from where it comes; else Refused (403)."""
        raw_host = headers.get("Host", "")
        host = HostName.parse(raw_host)
        if host is None or not self.host_allowed(host, bound_port):
            raise Refused(403, f"refused: Host {raw_host[:100]!r} is not this dashboard's "
                               "address (protection against DNS rebinding); open it as "
                               f"http://127.0.0.1:{bound_port}/ or add the name to "
                               "DASHBOARD_ALLOWED_HOSTS")
        origin = headers.get("Origin")
        if origin is not None and not same_origin(origin, host):
            raise Refused(403, f"refused: cross-origin request from {origin[:100]!r}; the API "
                               "answers only the dashboard's own page and the soulflow CLI")
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site.strip().lower() not in ALLOWED_FETCH_SITES:
            raise Refused(403, f"refused: a {site[:40]} request; the API answers only the "
                               "dashboard's own page and the soulflow CLI")
        return host


def same_origin(origin: str, host: HostName) -> bool:
    """True if `origin` (scheme://host[:port]) names the host the request was sent to."""
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port
    except ValueError:
        return False
    default = _DEFAULT_PORTS.get(parts.scheme)
    if default is None or not parts.hostname or parts.path not in ("", "/") or \
            parts.username or parts.query or parts.fragment:
        return False
    return parts.hostname.lower() == host.name and \
        (origin_port or default) == (host.port or default)


def decode_json_object(content_type: str, raw: bytes) -> dict[str, Any]:
    """The body of a state-changing request, which must be a JSON object sent as JSON."""
    if content_type.strip().lower() != "application/json":
        raise Refused(415, f"refused: Content-Type {content_type[:60] or '(none)'!r}; "
                           "send the body as application/json")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused(400, "the request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise Refused(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Refused(400, "the request body must be a JSON object")
    return body
