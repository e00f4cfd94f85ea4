"""The dashboard's API refuses rebinding Hosts, foreign Origins and non-JSON writes.

A real DashboardService on port 0 with the real local channel, bus and event hub; a small
reader task plays the daemon's inbound side (journal, then commit), so an accepted chat
message really lands in the journal and a refused one provably does not. Every `/api/*`
route is taken from the app's router, so a route added later is covered automatically.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.local.adapter import LocalChannel
from soulflow.contracts import OutboundMessage
from soulflow.dashboard.guard import STATIC_ASSETS, is_guarded
from soulflow.dashboard.service import DashboardService
from soulflow.events.hub import EventHub


async def _ok_state() -> dict[str, bool]:
    return {"ok": True}

TOKEN = "t0ken-for-the-guard-tests"
FORM_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x")
CROSS_SITE_BODY = '{"chat_id": "dashboard", "text": "/repl print(1)"}'


@dataclass
class Rig:
    service: DashboardService
    local: LocalChannel
    bus: MessageBus
    http: httpx.AsyncClient
    responses: list[httpx.Response] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self.service.bound_port is not None
        return self.service.bound_port

    @property
    def own_origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self) -> list[tuple[str, str]]:
        """(method, concrete path) of every guarded route the app serves."""
        found = set()
        for route in self.service.build_app().router.routes():
            canonical = route.resource.canonical if route.resource is not None else ""
            if is_guarded(canonical):
                found.add((route.method, re.sub(r"\{[^}]+\}", "dashboard", canonical)))
        return sorted(found)

    async def nothing_happened(self) -> None:
        assert await self.bus.inbound.pending() == []
        assert self.local.messages("dashboard") == []
        assert len(await self.bus.dlq.entries()) == 1  # neither purged nor replayed


async def _daemon_side(local: LocalChannel, bus: MessageBus) -> None:
    """What the channel manager does with the local channel: journal, then commit."""
    while True:
        batch = await local.read()
        for message in batch:
            await bus.inbound.accept(message)
        if batch:
            local.commit(batch)


async def _make_rig(tmp_path: Path, token: str = "") -> AsyncIterator[Rig]:
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    await bus.dlq.add(OutboundMessage(provider="local", chat_id="x", content="dead"),
                retry_count=3, error="gave up")
    local = LocalChannel(tmp_path / "runtime" / "local")
    service = DashboardService(host="127.0.0.1", port=0, token=token, hub=EventHub(),
                               state=_ok_state, local=local, bus=bus,
                               ready=lambda: True)
    await service.start()
    reader = asyncio.create_task(_daemon_side(local, bus), name="test-local-reader")
    responses: list[httpx.Response] = []

    async def record(response: httpx.Response) -> None:
        responses.append(response)

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.bound_port}",
                                 timeout=10, event_hooks={"response": [record]}) as http:
        rig = Rig(service, local, bus, http, responses)
        try:
            yield rig
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await service.stop()
            await bus.stop(1)
            await bus.backend.stop()
    for response in responses:  # whatever was asked, no permissive CORS header anywhere
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async for made in _make_rig(tmp_path):
        yield made


@pytest.fixture
async def token_rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async for made in _make_rig(tmp_path, TOKEN):
        yield made


def _json_body(method: str) -> dict[str, str] | None:
    return None if method in ("GET", "HEAD") else {"chat_id": "dashboard", "text": "hi"}


async def test_every_route_refuses_a_rebinding_host(rig: Rig) -> None:
    routes = rig.routes()
    assert {("GET", "/api/state"), ("POST", "/api/chat"), ("POST", "/api/dlq/purge")} <= \
        set(routes)
    hosts = [f"evil.example:{rig.port}", "evil.example", f"127.0.0.1.evil.example:{rig.port}",
             "localhost:1", f"127.0.0.2:{rig.port}", "", f"user@127.0.0.1:{rig.port}"]
    for method, path in routes:
        for host in hosts:
            response = await rig.http.request(method, path, headers={"Host": host},
                                              json=_json_body(method))
            assert response.status_code == 403, (method, path, host, response.text)
            if method != "HEAD":
                assert "DNS rebinding" in response.json()["error"]
    for odd in ("//api/state", "/%61pi/state", "/api/nope", "/metrics", "/API/state"):
        response = await rig.http.get(odd, headers={"Host": "evil.example"})
        assert response.status_code == 403, odd  # default deny: not only the known routes
    await rig.nothing_happened()


async def test_only_the_page_its_files_and_healthz_are_open(rig: Rig) -> None:
    served = {route.resource.canonical for route in rig.service.build_app().router.routes()
              if route.resource is not None}
    page_files = {f"/static/{name}" for name in STATIC_ASSETS}
    assert {path for path in served if not is_guarded(path)} == {"/", "/healthz", *page_files}
    for path in ("/", "/healthz", *page_files):
        assert (await rig.http.get(path, headers={"Host": "evil.example"})).status_code == 200


async def test_every_api_route_refuses_a_foreign_origin_or_cross_site_fetch(rig: Rig) -> None:
    origins = ["http://evil.example", f"http://evil.example:{rig.port}", "null",
               f"http://127.0.0.1:{rig.port + 1 if rig.port < 65535 else 1}",
               f"http://localhost:{rig.port}", "file://", f"{rig.own_origin}/path"]
    for method, path in rig.routes():
        for origin in origins:
            response = await rig.http.request(method, path, headers={"Origin": origin},
                                              json=_json_body(method))
            assert response.status_code == 403, (method, path, origin)
        for site in ("cross-site", "same-site"):
            response = await rig.http.request(method, path, headers={"Sec-Fetch-Site": site},
                                              json=_json_body(method))
            assert response.status_code == 403, (method, path, site)
    await rig.nothing_happened()


async def test_html_form_posts_are_refused_and_change_nothing(rig: Rig) -> None:
    """The attack of issue 8: a page's form POSTs `/repl …` as text/plain to /api/chat."""
    posts = [path for method, path in rig.routes() if method not in ("GET", "HEAD")]
    assert "/api/chat" in posts
    for path in posts:
        for content_type in FORM_TYPES:
            # as a browser sends it from another site: refused on its Origin
            cross = await rig.http.post(path, content=CROSS_SITE_BODY, headers={
                "Content-Type": content_type, "Origin": "http://evil.example",
                "Sec-Fetch-Site": "cross-site"})
            assert cross.status_code == 403, (path, content_type)
            # with no Origin at all (an old browser, a proxy that strips it): refused on type
            bare = await rig.http.post(path, content=CROSS_SITE_BODY,
                                       headers={"Content-Type": content_type})
            assert bare.status_code == 415, (path, content_type, bare.text)
        untyped = await rig.http.post(path, content=CROSS_SITE_BODY)
        assert untyped.status_code == 415
        for bad in (b"", b"not json", b"[1, 2]", b"\xff\xfe"):
            response = await rig.http.post(path, content=bad,
                                           headers={"Content-Type": "application/json"})
            assert response.status_code == 400, (path, bad)
    await rig.nothing_happened()


async def test_the_same_origin_page_and_the_cli_are_served(rig: Rig) -> None:
    page = await rig.http.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    api_js = (await rig.http.get("/static/api.js")).text
    assert '"Content-Type": "application/json"' in api_js  # the page's writes are JSON
    app_js = (await rig.http.get("/static/app.js")).text
    assert "sandbox: ${s.sandbox.mode}" in app_js  # which wall code runs behind
    assert page.headers["X-Frame-Options"] == "DENY"
    browser = {"Origin": rig.own_origin, "Sec-Fetch-Site": "same-origin"}
    assert (await rig.http.get("/api/state", headers={"Sec-Fetch-Site": "same-origin"})
            ).json() == {"ok": True}
    assert (await rig.http.get("/api/state", headers={"Sec-Fetch-Site": "none"})
            ).status_code == 200  # the operator typed the URL
    sent = await rig.http.post("/api/chat", headers={
        **browser, "Content-Type": "application/json; charset=utf-8"},
        content=b'{"chat_id": "dashboard", "text": "from the page"}')
    assert sent.status_code == 202, sent.text
    for host in (f"localhost:{rig.port}", f"[::1]:{rig.port}", f"LOCALHOST:{rig.port}"):
        origin = f"http://{host.lower()}"
        listed = await rig.http.get("/api/chat/dashboard/messages?after=-1",
                                    headers={"Host": host, "Origin": origin})
        assert [m["content"] for m in listed.json()["messages"]] == ["from the page"]
    assert [m.text for m in await rig.bus.inbound.pending()] == ["from the page"]
    cli = await rig.http.post("/api/chat", json={"chat_id": "cli", "text": "from the CLI"})
    assert cli.status_code == 202
    replayed = await rig.http.post("/api/dlq/replay", json={"ids": []})
    assert replayed.json() == {"ok": True, "replayed": 0}
    async with rig.http.stream("GET", "/api/events", headers=browser) as stream:
        assert stream.status_code == 200
        assert stream.headers["Content-Type"].startswith("text/event-stream")
    assert (await rig.http.get("/healthz")).status_code == 200


async def test_a_cors_preflight_is_never_approved(rig: Rig) -> None:
    for origin in ("http://evil.example", rig.own_origin):
        response = await rig.http.options("/api/chat", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert response.status_code in (403, 405)
    # the fixture checks that no response at all carried an Access-Control-* header


async def test_the_token_works_as_before_behind_the_origin_rules(token_rig: Rig) -> None:
    rig = token_rig
    assert (await rig.http.get("/api/state")).status_code == 401
    wrong = await rig.http.get("/api/state", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "Bearer" in wrong.json()["error"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await rig.http.get("/api/state", headers=auth)).status_code == 200
    rebinding = await rig.http.get("/api/state", headers={**auth, "Host": "evil.example"})
    assert rebinding.status_code == 403  # a token never makes a foreign Host acceptable
    form = await rig.http.post("/api/dlq/purge", headers={**auth, "Content-Type": "text/plain"},
                               content="{}")
    assert form.status_code == 415
    unauthenticated_json = await rig.http.post("/api/dlq/purge", json={})
    assert unauthenticated_json.status_code == 401
    await rig.nothing_happened()
    purged = await rig.http.post("/api/dlq/purge", json={}, headers=auth)
    assert purged.json() == {"ok": True, "purged": 1}
