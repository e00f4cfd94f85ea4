"""discord.py's HTTP client, pointed at this adapter's API and gateway and decoding leniently.

discord.py keeps its REST base URL (`Route.BASE`) and gateway URL
(`DiscordWebSocket.DEFAULT_GATEWAY`) on classes, and decodes REST bodies (`json_or_text`) and
gateway frames (`_ActiveDecompressionContext`) strictly through module globals. Changing those
would change every Discord client in the process, so nothing here touches them: each adapter
gets its own `RoutedHTTPClient`, which

* rewrites a request's URL from the library's default base to `api_url` (every REST call,
  the gateway's included, goes through `request`), and a gateway connection to the library's
  default gateway to `gateway_url` (`ws_connect`; a resume URL from READY is left alone);
* opens its aiohttp session with response classes that read bytes which are not UTF-8 as
  U+FFFD instead of raising: one such message used to make the gateway connection fail (and
  reconnect) and the REST catch-up of its channel fail, so it was neither answered nor
  recorded. The edge normalisation (channels/normalize.py) then treats it like any other text.

Two adapters with different URLs can therefore run in one process (tests do).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import discord.gateway
import discord.http
import discord.utils
import yarl
from discord.errors import HTTPException, LoginFailure

from soulflow.channels.lenient_http import LenientResponse

DISCORD_DEFAULT_BASE = discord.http.Route.BASE
DISCORD_DEFAULT_GATEWAY = str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


class LenientGatewaySocket(discord.gateway.DiscordClientWebSocketResponse):
    """The gateway socket inflates compressed frames itself (the same compression discord.py
    asked for) and hands discord.py text, decoded with U+FFFD for bytes that are not UTF-8."""

    _inflater: Any = None

    async def receive(self, timeout: float | None = None) -> Any:
        while True:
            message = await super().receive(timeout)
            if message.type is not aiohttp.WSMsgType.BINARY:
                return message
            if self._inflater is None:  # one stream per connection, as discord.py keeps it
                self._inflater = discord.utils._ActiveDecompressionContext()
            try:
                text = self._inflater.decompress(message.data)
            except UnicodeDecodeError as exc:  # `object` is the whole inflated frame
                text = bytes(exc.object).decode("utf-8", "replace")
            if text is not None:  # None: a partial frame, the rest comes next
                return aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, text, message.extra)


class RoutedHTTPClient(discord.http.HTTPClient):
    """One client's REST base URL and gateway URL, and a lenient session (see the module)."""

    def __init__(self, loop: Any, connector: aiohttp.BaseConnector | None = None, *,
                 api_url: str, gateway_url: str | None = None, **options: Any) -> None:
        super().__init__(loop, connector, **options)
        self.api_url = api_url.rstrip("/")
        self.gateway_url = gateway_url

    async def request(self, route: discord.http.Route, **kwargs: Any) -> Any:
        if route.url.startswith(DISCORD_DEFAULT_BASE):
            route.url = self.api_url + route.url[len(DISCORD_DEFAULT_BASE):]
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> Any:
        if self.gateway_url and url.startswith(DISCORD_DEFAULT_GATEWAY):
            query = yarl.URL(url).query
            url = str(yarl.URL(self.gateway_url).with_query(query))
        return await super().ws_connect(url, compress=compress)

    async def static_login(self, token: str) -> Any:
        """The library's login, with this client's session classes (see the module)."""
        if self.connector is discord.utils.MISSING:
            self.connector = aiohttp.TCPConnector(limit=0)
        self._HTTPClient__session = aiohttp.ClientSession(
            connector=self.connector, ws_response_class=LenientGatewaySocket,
            response_class=LenientResponse, cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=None if self.http_trace is None else [self.http_trace])
        self._global_over = asyncio.Event()
        self._global_over.set()
        old_token, self.token = self.token, token
        try:
            return await self.request(discord.http.Route("GET", "/users/@me"))
        except HTTPException as exc:
            self.token = old_token
            if exc.status == 401:
                raise LoginFailure("Improper token has been passed.") from exc
            raise


def route_client(client: discord.Client, *, api_url: str, gateway_url: str | None,
                 max_ratelimit_timeout: float | None = None) -> None:
    """Give a freshly built `discord.Client` its own routed HTTP client (before login)."""
    http = RoutedHTTPClient(client.loop, None, api_url=api_url, gateway_url=gateway_url,
                            max_ratelimit_timeout=max_ratelimit_timeout)
    client.http = http
    client._connection.http = http
