"""One read-only call per platform token, through the platform's SDK, for `soulflow doctor`.

Slack `auth.test` (and `apps.connections.open` for a Socket Mode app token, which only hands
out a URL), Telegram `getMe`, Discord `GET /users/@me`: the same SDKs and base URLs the
adapters use, so a token or URL the daemon would reject is rejected here. The SDKs stay in
`soulflow.channels`; callers get a `TokenProbe` and word the advice themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from enum import StrEnum

import aiohttp

UNREACHABLE_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


class ProbeOutcome(StrEnum):
    OK = "ok"
    REFUSED = "refused"  # the platform answered and rejected the token
    UNREACHABLE = "unreachable"  # no answer: network, proxy, wrong URL
    FAILED = "failed"  # any other error answer


@dataclass(frozen=True, slots=True)
class TokenProbe:
    """`detail`: who the token is (when OK) or what went wrong, in a few words."""

    outcome: ProbeOutcome
    detail: str


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:200]


async def probe_slack_bot(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    from slack_sdk.errors import SlackApiError, SlackClientError
    from slack_sdk.web.async_client import AsyncWebClient

    url = api_url.rstrip("/") + "/"
    async with aiohttp.ClientSession(trust_env=True) as session:
        client = AsyncWebClient(token=token, base_url=url, session=session,
                                timeout=max(1, int(timeout_s)))
        try:
            data = (await client.auth_test()).data
        except SlackApiError as exc:
            return TokenProbe(ProbeOutcome.REFUSED, str(exc.response.get("error", "error")))
        except (SlackClientError, *UNREACHABLE_ERRORS) as exc:
            return TokenProbe(ProbeOutcome.UNREACHABLE, _why(exc))
    assert isinstance(data, dict)
    return TokenProbe(ProbeOutcome.OK, f"team {data.get('team', '?')}, bot user "
                                       f"{data.get('user', '?')}")


async def probe_slack_app(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    from slack_sdk.errors import SlackApiError, SlackClientError
    from slack_sdk.web.async_client import AsyncWebClient

    url = api_url.rstrip("/") + "/"
    async with aiohttp.ClientSession(trust_env=True) as session:
        client = AsyncWebClient(base_url=url, session=session, timeout=max(1, int(timeout_s)))
        try:
            await client.apps_connections_open(app_token=token)
        except SlackApiError as exc:
            return TokenProbe(ProbeOutcome.REFUSED, str(exc.response.get("error", "error")))
        except (SlackClientError, *UNREACHABLE_ERRORS) as exc:
            return TokenProbe(ProbeOutcome.UNREACHABLE, _why(exc))
    return TokenProbe(ProbeOutcome.OK, "Socket Mode")


async def probe_telegram(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, TelegramError

    from soulflow.channels.telegram_http import AiohttpRequest

    request = AiohttpRequest(pool_size=1, connect_timeout=timeout_s, read_timeout=timeout_s,
                             write_timeout=timeout_s, pool_timeout=timeout_s)
    bot = Bot(token, base_url=f"{api_url.rstrip('/')}/bot", request=request)
    try:
        await bot.initialize()  # calls getMe
    except InvalidToken:
        return TokenProbe(ProbeOutcome.REFUSED, "401 Unauthorized")
    except NetworkError as exc:  # TimedOut is one
        return TokenProbe(ProbeOutcome.UNREACHABLE, _why(exc))
    except TelegramError as exc:
        return TokenProbe(ProbeOutcome.FAILED, _why(exc))
    finally:
        with contextlib.suppress(Exception):
            await bot.shutdown()
    return TokenProbe(ProbeOutcome.OK, f"@{bot.username}")


async def probe_discord(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    import discord

    from soulflow.channels.discord_http import RoutedHTTPClient

    # its own base URL, as the Discord channel's clients have: discord.py's class-level
    # `Route.BASE` is never changed, so a running adapter in this process is not affected
    http = RoutedHTTPClient(asyncio.get_running_loop(), aiohttp.TCPConnector(limit=1),
                            api_url=api_url, max_ratelimit_timeout=timeout_s)
    try:
        me = await http.static_login(token)
    except discord.LoginFailure:
        return TokenProbe(ProbeOutcome.REFUSED, "401 Unauthorized")
    except discord.HTTPException as exc:
        return TokenProbe(ProbeOutcome.FAILED, f"HTTP {exc.status}")
    except UNREACHABLE_ERRORS as exc:
        return TokenProbe(ProbeOutcome.UNREACHABLE, _why(exc))
    finally:
        await http.close()
    return TokenProbe(ProbeOutcome.OK, str(me.get("username", "?")))
