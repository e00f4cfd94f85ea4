"""web_fetch against a loopback aiohttp server; every refusal happens before any connection
(only 127.0.0.1 ever receives traffic)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ToolContext, ToolError
from soulflow.agent.tools.html_text import html_to_text
from soulflow.agent.tools.web import BlockedAddressError, WebFetchTool, non_public_reason
from tests.running import serving

PAGE = """<html><head><title>Test  page</title><style>body{color:red}</style>
<script>var secret = "do not show";</script></head>
<body><h1>Hello</h1><p>First   paragraph
with <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>"""


class FakeResolver(AbstractResolver):
    """Names resolve from a dict; nothing touches real DNS."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"unknown host {host}")
        return [
            ResolveResult(hostname=host, host=ip, port=port, family=socket.AF_INET, proto=0,
                          flags=socket.AI_NUMERICHOST)
            for ip in self.table[host]
        ]

    async def close(self) -> None:
        return None


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """Base URL of a loopback server; yields e.g. ``127.0.0.1:PORT``."""

    async def html(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="plain body " * 50)

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for _ in range(48):  # 3 MB in 64 KB chunks
            await resp.write(b"y" * 65536)
        await resp.write_eof()
        return resp

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\x00\x00" * 10, content_type="image/png")

    async def hop(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        raise web.HTTPFound("/text" if n == 0 else f"/hop/{n - 1}")

    async def to_loopback(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{request.url.port}/text")

    app = web.Application()
    app.router.add_get("/html", html)
    app.router.add_get("/text", text)
    app.router.add_get("/big", big)
    app.router.add_get("/binary", binary)
    app.router.add_get("/hop/{n}", hop)
    app.router.add_get("/to-loopback", to_loopback)
    async with serving(app) as port:
        yield f"127.0.0.1:{port}"


@pytest.fixture
def loopback_tool() -> WebFetchTool:
    return WebFetchTool(allowed_hosts={"127.0.0.1"})


# ----------------------------------------------------------------- fetching


async def test_html_is_converted_to_text(
    loopback_tool: WebFetchTool, server: str, ctx: ToolContext
) -> None:
    out = await loopback_tool.run({"url": f"http://{server}/html"}, ctx)
    header, body = out.split("\n\n", 1)
    assert header.splitlines() == [
        f"URL: http://{server}/html",
        "Status: 200 OK",
        "Content-Type: text/html; charset=utf-8",
    ]
    assert body == "# Test page\n\nHello\n\nFirst paragraph with bold text.\n\n- one\n- two"
    assert "do not show" not in out and "color:red" not in out


async def test_allow_private_and_max_chars(server: str, ctx: ToolContext) -> None:
    tool = WebFetchTool(allow_private=True)
    out = await tool.run({"url": f"http://{server}/text", "max_chars": 100}, ctx)
    assert "Status: 200 OK" in out
    assert ("plain body " * 50)[:100] in out
    assert out.endswith(f"[text truncated: {550 - 100} more characters]")


async def test_download_is_capped_at_2_mb(
    loopback_tool: WebFetchTool, server: str, ctx: ToolContext
) -> None:
    out = await loopback_tool.run({"url": f"http://{server}/big", "max_chars": 100}, ctx)
    assert "[download stopped at 2 MB]" in out
    assert f"[text truncated: {2 * 1024 * 1024 - 100} more characters]" in out


async def test_binary_content_is_not_dumped(
    loopback_tool: WebFetchTool, server: str, ctx: ToolContext
) -> None:
    out = await loopback_tool.run({"url": f"http://{server}/binary"}, ctx)
    assert out.endswith("[binary content not shown: image/png, 60 bytes]")


async def test_redirects_are_followed_up_to_five(
    loopback_tool: WebFetchTool, server: str, ctx: ToolContext
) -> None:
    out = await loopback_tool.run({"url": f"http://{server}/hop/4"}, ctx)
    assert out.startswith(f"URL: http://{server}/text\nStatus: 200")
    with pytest.raises(ToolError, match="too many redirects"):
        await loopback_tool.run({"url": f"http://{server}/hop/5"}, ctx)


async def test_through_the_registry(server: str, ctx: ToolContext) -> None:
    registry = build_default_registry(allowed_hosts={"127.0.0.1"})
    result = await registry.execute("web_fetch", {"url": f"http://{server}/text"}, ctx)
    assert result.status == "ok" and "plain body" in result.output
    refused = await build_default_registry().execute(
        "web_fetch", {"url": f"http://{server}/text"}, ctx
    )
    assert refused.status == "error" and "loopback address" in refused.output


# ----------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1/", "a loopback"),
        ("http://localhost/", "a loopback"),
        ("http://10.0.0.1/", "a private"),
        ("http://192.168.1.1/admin", "a private"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local"),
        ("http://[::1]/", "a loopback"),
        ("http://0.0.0.0/", "an unspecified"),
        ("https://[::ffff:127.0.0.1]/", "a loopback"),
        ("http://[fe80::1]/", "a link-local"),
    ],
)
async def test_non_public_addresses_are_refused(url: str, kind: str, ctx: ToolContext) -> None:
    tool = WebFetchTool(resolver=FakeResolver({"localhost": ["127.0.0.1"]}))
    with pytest.raises(BlockedAddressError, match=f"is {kind} address"):
        await tool.run({"url": url}, ctx)


async def test_real_localhost_name_is_refused(server: str, ctx: ToolContext) -> None:
    port = server.rsplit(":", 1)[1]
    with pytest.raises(BlockedAddressError, match="localhost resolves to"):
        await WebFetchTool().run({"url": f"http://localhost:{port}/text"}, ctx)


async def test_names_resolving_to_private_addresses_are_refused(ctx: ToolContext) -> None:
    resolver = FakeResolver(
        {"intranet.test": ["10.1.2.3"], "mixed.test": ["93.184.216.34", "192.168.0.7"]}
    )
    tool = WebFetchTool(resolver=resolver)
    with pytest.raises(BlockedAddressError, match=r"intranet.test resolves to 10.1.2.3"):
        await tool.run({"url": "http://intranet.test/"}, ctx)
    with pytest.raises(BlockedAddressError, match=r"mixed.test resolves to 192.168.0.7"):
        await tool.run({"url": "https://mixed.test/"}, ctx)
    assert resolver.asked == ["intranet.test", "mixed.test"]


async def test_redirect_from_allowed_host_to_loopback_is_refused(
    server: str, ctx: ToolContext
) -> None:
    port = server.rsplit(":", 1)[1]
    tool = WebFetchTool(
        allowed_hosts={"allowed.test"}, resolver=FakeResolver({"allowed.test": ["127.0.0.1"]})
    )
    ok = await tool.run({"url": f"http://allowed.test:{port}/text"}, ctx)
    assert "plain body" in ok
    with pytest.raises(BlockedAddressError, match="127.0.0.1 is a loopback address"):
        await tool.run({"url": f"http://allowed.test:{port}/to-loopback"}, ctx)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("ftp://example.com/x", "only http and https"),
        ("http:///path-only", "has no host"),
    ],
)
async def test_bad_urls(url: str, message: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=message):
        await WebFetchTool().run({"url": url}, ctx)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("172.16.5.4", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("fc00::1", False),
        ("::", False),
    ],
)
def test_non_public_reason(address: str, public: bool) -> None:
    assert (non_public_reason(ipaddress.ip_address(address)) is None) is public


def test_html_to_text_keeps_pre_and_drops_invisible() -> None:
    html = "<p>a &amp; b</p><pre>def f():\n    return 1</pre><noscript>x</noscript><br>end"
    assert html_to_text(html) == "a & b\n\ndef f():\n    return 1\n\nend"
