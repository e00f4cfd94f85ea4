"""The `web_fetch` tool: read a public web page without becoming a proxy into the local network.

A model can be talked into fetching ``http://169.254.169.254/`` (cloud credentials) or an admin
panel on ``localhost``; the daemon often runs next to such services. So by default every
address a request would connect to must be public:

* IP-literal hosts are checked before each request (including every redirect hop, which is
  followed by hand, at most 5);
* host names are checked inside the connector's resolver, on the very addresses the socket
  will use - resolving separately and connecting later would let DNS rebinding slip through.
  If *any* address of a name is non-public the fetch is refused.

``allow_private`` lifts the rule entirely; ``allowed_hosts`` lifts it for named hosts (both
come from the daemon's configuration). Proxies from the environment are ignored: a proxy
would connect on our behalf to addresses we never see.

A call whose arguments hold a secret reference sends that secret over the network, so it asks
the user first, naming the secrets and the host ("sends secret NAME to HOST"). Such a call only
runs approved, and an approved call follows redirects on the approved host only: an open
redirect must not carry the secret to a host nobody approved.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import socket
from collections.abc import Iterable

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.html_text import html_to_text
from soulflow.security.references import iter_strings
from soulflow.security.syntax import iter_secret_refs

MAX_BYTES = 2 * 1024 * 1024
FETCH_TIMEOUT_S = 20.0
MAX_REDIRECTS = 5
DEFAULT_MAX_CHARS = 20_000
USER_AGENT = "soulflow-web-fetch/0.1 (+https://github.com/soulflow)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "text/")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddressError(ToolError):
    """The request would connect to a non-public address."""


def non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public internet address ("a loopback"...), or None if it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    checks = (
        ("an unspecified", address.is_unspecified),
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("a private", address.is_private),
        ("a reserved", address.is_reserved),
        ("a non-public", not address.is_global),
    )
    return next((label for label, hit in checks if hit), None)


class AddressPolicy:
    """Which hosts and addresses `web_fetch` may connect to."""

    def __init__(self, *, allow_private: bool = False, allowed_hosts: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed_hosts = frozenset(_normalise_host(h) for h in allowed_hosts)

    def exempt(self, host: str) -> bool:
        return self.allow_private or _normalise_host(host) in self.allowed_hosts

    def check_address(self, host: str, address: str) -> None:
        """Raise `BlockedAddressError` if ``host`` (resolving to ``address``) is off limits."""
        if self.exempt(host):
            return
        try:
            parsed = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError as exc:
            raise BlockedAddressError(f"cannot check address {address!r} of {host}") from exc
        reason = non_public_reason(parsed)
        if reason is None:
            return
        via = "" if _normalise_host(host) == str(parsed) else f" ({host} resolves to {parsed})"
        raise BlockedAddressError(
            f"refusing to fetch from {host}: {parsed} is {reason} address{via}; only public "
            "internet addresses can be fetched"
        )


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and refuses names with any non-public address."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner or aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self._policy.check_address(host, result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class WebFetchTool(Tool):
    name = "web_fetch"
    description = (
        "Fetch an http(s) URL and return its status, content type and text (HTML is converted "
        "to plain text). Only public internet addresses; at most 2 MB is downloaded."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1},
            "max_chars": {
                "type": "integer",
                "minimum": 100,
                "maximum": 200_000,
                "description": f"Maximum characters of text (default {DEFAULT_MAX_CHARS}).",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    idempotent = True
    timeout_s = FETCH_TIMEOUT_S + 10

    def __init__(
        self,
        *,
        allow_private: bool = False,
        allowed_hosts: Iterable[str] = (),
        resolver: AbstractResolver | None = None,
    ) -> None:
        """``resolver`` replaces the system resolver (tests, custom DNS); it is still guarded."""
        self.policy = AddressPolicy(allow_private=allow_private, allowed_hosts=allowed_hosts)
        self._resolver = resolver

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        """Sending a secret anywhere is the user's call: name the secrets and the host."""
        labels: list[str] = []
        for string in iter_strings(params):
            for ref in iter_secret_refs(string):
                if ref.label not in labels:
                    labels.append(ref.label)
        if not labels:
            return None
        host = _host_for_approval(str(params.get("url", "")))
        noun = "secret" if len(labels) == 1 else "secrets"
        return f"sends {noun} {', '.join(labels)} to {host}"

    async def run(self, params: Params, ctx: ToolContext) -> str:
        url = _parse_url(params["url"])
        max_chars = params.get("max_chars", DEFAULT_MAX_CHARS)
        # an approved call (the only way a secret gets here) stays on the approved host
        pinned = url.host if ctx.approved else None
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                return await self._fetch(url, max_chars, pinned)
        except TimeoutError as exc:
            raise ToolError(f"fetching {url} timed out after {FETCH_TIMEOUT_S:g} s") from exc
        except aiohttp.ClientError as exc:
            raise ToolError(f"could not fetch {url}: {type(exc).__name__}: {exc}") from exc

    async def _fetch(self, url: URL, max_chars: int, pinned: str | None = None) -> str:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self.policy, self._resolver), use_dns_cache=False
        )
        async with aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            headers={"User-Agent": USER_AGENT},
            timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
        ) as session:
            for _hop in range(MAX_REDIRECTS + 1):
                self._check_literal_host(url)
                async with session.get(url, allow_redirects=False) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in _REDIRECTS and location:
                        url = _parse_url(str(url.join(URL(location))))
                        if pinned is not None and url.host != pinned:
                            raise ToolError(
                                f"the approved request to {pinned} was redirected to "
                                f"{url.host}; not following it (the approval covers "
                                f"{pinned} only)")
                        continue
                    body, cut = await _read_limited(resp, MAX_BYTES)
                    return _render(resp, url, body, cut, max_chars)
        raise ToolError(f"too many redirects (more than {MAX_REDIRECTS}); last URL was {url}")

    def _check_literal_host(self, url: URL) -> None:
        """IP literals never reach the resolver, so they are checked here."""
        host = url.host or ""
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return
        self.policy.check_address(host, host)


def _host_for_approval(raw: str) -> str:
    """The host as the user should read it; the raw URL's start if it does not parse."""
    try:
        host = URL(raw.strip()).host
    except (ValueError, TypeError):
        host = None
    return host or f"the address {raw[:80]!r}"


def _normalise_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _parse_url(raw: str) -> URL:
    try:
        url = URL(raw.strip())
    except (ValueError, TypeError) as exc:
        raise ToolError(f"invalid URL {raw!r}: {exc}") from exc
    if url.scheme not in ("http", "https"):
        scheme = url.scheme or "(none)"
        raise ToolError(f"only http and https URLs can be fetched (scheme {scheme}): {raw!r}")
    if not url.host:
        raise ToolError(f"URL {raw!r} has no host")
    return url


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the (decompressed) body; True if there was more."""
    body = bytearray()
    async for chunk in resp.content.iter_chunked(65536):
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


def _render(resp: aiohttp.ClientResponse, url: URL, body: bytes, cut: bool, max_chars: int) -> str:
    content_type = resp.headers.get("Content-Type", "")
    header = f"URL: {url}\nStatus: {resp.status} {resp.reason or ''}".rstrip()
    header += f"\nContent-Type: {content_type or '(none)'}\n\n"
    text = _body_text(resp.content_type, resp.charset, body)
    notes: list[str] = []
    if cut:
        notes.append(f"[download stopped at {MAX_BYTES // (1024 * 1024)} MB]")
    if len(text) > max_chars:
        notes.append(f"[text truncated: {len(text) - max_chars} more characters]")
        text = text[:max_chars]
    return header + text + ("\n" + "\n".join(notes) if notes else "")


def _body_text(mime: str, charset: str | None, body: bytes) -> str:
    if not body:
        return "(empty body)"
    textual = mime.startswith(_TEXT_TYPES) or mime.endswith(("+json", "+xml"))
    if not textual and (mime != "application/octet-stream" or b"\x00" in body[:4096]):
        return f"[binary content not shown: {mime or 'unknown type'}, {len(body)} bytes]"
    text = body.decode(_codec(charset), errors="replace")
    return html_to_text(text) if mime in ("text/html", "application/xhtml+xml") else text


def _codec(charset: str | None) -> str:
    try:
        return codecs.lookup(charset or "utf-8").name
    except LookupError:
        return "utf-8"

