"""Each security header the dashboard sets, on every kind of response it gives: the page, a
static asset, an API answer, a refusal and a miss. A real DashboardService (the request-guard
tests' rig); the CSP is read directive by directive, and the page is checked to need nothing
the CSP forbids (an inline script would be blocked, so there must be none)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.dashboard.test_request_guard import Rig, rig  # noqa: F401 - rig is a fixture


async def every_kind(rig: Rig) -> dict[str, httpx.Response]:  # noqa: F811
    return {
        "page": await rig.http.get("/"),
        "asset": await rig.http.get("/static/app.js"),
        "api": await rig.http.get("/api/state"),
        "refusal": await rig.http.post(
            "/api/chat", json={"chat_id": "dashboard", "text": "hi"},
            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}),
        "miss": await rig.http.get("/no/such/page"),
    }


@pytest.mark.parametrize(("header", "value"), [
    # a browser may not guess a type: a chat message served as text never runs as script
    ("X-Content-Type-Options", "nosniff"),
    # no other site may frame the console and trick a click on "approve" (clickjacking)
    ("X-Frame-Options", "DENY"),
    # a link followed from the console does not tell the other site where it came from
    ("Referrer-Policy", "no-referrer"),
])
async def test_every_response_carries(rig: Rig, header: str, value: str) -> None:  # noqa: F811
    responses = await every_kind(rig)
    assert responses["refusal"].status_code == 403 and responses["miss"].status_code == 404
    for kind, response in responses.items():
        assert response.headers.get(header) == value, (kind, dict(response.headers))


def directives(policy: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


async def test_every_response_carries_the_content_security_policy(rig: Rig) -> None:  # noqa: F811
    """Scripts, styles and connections from the console's own origin only (no inline script,
    no eval), nothing may frame it, and no <base> or form can send the page elsewhere."""
    for kind, response in (await every_kind(rig)).items():
        policy = directives(response.headers["Content-Security-Policy"])
        assert policy == {
            "default-src": ["'self'"], "script-src": ["'self'"], "style-src": ["'self'"],
            "img-src": ["'self'", "data:"], "connect-src": ["'self'"],
            "base-uri": ["'none'"], "form-action": ["'none'"], "frame-ancestors": ["'none'"],
        }, kind


async def test_the_page_needs_nothing_its_policy_forbids(rig: Rig) -> None:  # noqa: F811
    page = (await rig.http.get("/")).text
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts and all(re.search(r'\bsrc="/static/', tag) for tag in scripts), scripts
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", page)  # no inline code
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers
    assert "<style" not in page and 'style="' not in page  # no inline styles


async def test_assets_and_the_event_stream_are_not_cached(rig: Rig) -> None:  # noqa: F811
    """After an upgrade the browser asks again instead of running yesterday's script, and no
    cache keeps a copy of the live event stream."""
    for name in ("app.js", "api.js"):
        asset = await rig.http.get(f"/static/{name}")
        assert asset.status_code == 200 and asset.headers["Cache-Control"] == "no-cache"
    async with rig.http.stream("GET", "/api/events") as events:
        assert events.status_code == 200
        assert events.headers["Cache-Control"] == "no-cache"
        assert events.headers["X-Content-Type-Options"] == "nosniff"
