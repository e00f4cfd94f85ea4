"""Checks that talk to a platform: each configured channel's token through the real SDK.

One cheap, read-only call per token - Slack `auth.test` (and `apps.connections.open` for a
Socket Mode app token), Telegram `getMe`, Discord `GET /users/@me` - made with the same SDK
and base URL the daemon uses, so a token or URL the daemon would reject is rejected here.
The runner bounds each check with its timeout; the SDK clients also get it, so a check that
times out closes its connections instead of leaving them behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import aiohttp

from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip

SLACK_APPS = "https://api.slack.com/apps"
UNREACHABLE = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


async def check_channels(ctx: DoctorContext) -> list[CheckResult]:
    """Skip line when no platform channel is configured (the local channel needs no token)."""
    if ctx.settings is None:
        return [skip("channels", "settings are invalid")]
    if any(ctx.settings[n] for n in ("SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN",
                                     "DISCORD_BOT_TOKEN")):
        return []
    return [skip("channels", "no platform channel configured (the local channel needs no "
                             "token)")]


async def check_slack(ctx: DoctorContext) -> list[CheckResult]:
    from slack_sdk.errors import SlackApiError, SlackClientError
    from slack_sdk.web.async_client import AsyncWebClient

    settings = ctx.settings
    if settings is None or not settings["SLACK_BOT_TOKEN"]:
        return []
    name, url = "channel slack", settings["SLACK_API_URL"].rstrip("/") + "/"
    results: list[CheckResult] = []
    async with aiohttp.ClientSession(trust_env=True) as session:
        client = AsyncWebClient(token=settings["SLACK_BOT_TOKEN"], base_url=url,
                                session=session, timeout=max(1, int(ctx.timeout_s)))
        try:
            data = (await client.auth_test()).data
        except SlackApiError as exc:
            error = exc.response.get("error", "error")
            return [fail(name, f"auth.test refused the bot token ({error})",
                         f"copy the Bot User OAuth Token (xoxb-…) from {SLACK_APPS} → your "
                         "app → OAuth & Permissions into SLACK_BOT_TOKEN")]
        except (SlackClientError, *UNREACHABLE) as exc:
            return [_unreachable(name, "Slack", url, exc, "SLACK_API_URL")]
        assert isinstance(data, dict)
        results.append(ok(name, f"bot token works (team {data.get('team', '?')}, bot user "
                                f"{data.get('user', '?')})"))
        app_token = settings["SLACK_APP_TOKEN"]
        if app_token:
            results.append(await _slack_app_token(client, app_token))
    return results


async def _slack_app_token(client: object, app_token: str) -> CheckResult:
    """`apps.connections.open` only hands out a Socket Mode URL (never used here)."""
    from slack_sdk.errors import SlackApiError, SlackClientError

    name = "channel slack socket"
    try:
        await client.apps_connections_open(app_token=app_token)  # type: ignore[attr-defined]
    except SlackApiError as exc:
        error = exc.response.get("error", "error")
        return fail(name, f"apps.connections.open refused the app token ({error})",
                    f"create an app-level token with connections:write at {SLACK_APPS} → "
                    "Basic Information, and enable Socket Mode; set it as SLACK_APP_TOKEN")
    except (SlackClientError, *UNREACHABLE) as exc:
        return fail(name, f"Socket Mode check failed: {_why(exc)}", "check SLACK_API_URL")
    return ok(name, "app token works (Socket Mode)")


async def check_telegram(ctx: DoctorContext) -> list[CheckResult]:
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, TelegramError

    from soulflow.channels.telegram_http import AiohttpRequest

    settings = ctx.settings
    if settings is None or not settings["TELEGRAM_BOT_TOKEN"]:
        return []
    name, url = "channel telegram", settings["TELEGRAM_API_URL"].rstrip("/")
    limit = ctx.timeout_s
    bot = Bot(settings["TELEGRAM_BOT_TOKEN"], base_url=f"{url}/bot",
              request=AiohttpRequest(pool_size=1, connect_timeout=limit, read_timeout=limit,
                                     write_timeout=limit, pool_timeout=limit))
    try:
        await bot.initialize()  # calls getMe
    except InvalidToken:
        return [fail(name, "getMe refused the bot token (401 Unauthorized)",
                     "get the token from @BotFather (/token) and set TELEGRAM_BOT_TOKEN")]
    except NetworkError as exc:  # TimedOut is one
        return [_unreachable(name, "Telegram", url, exc, "TELEGRAM_API_URL")]
    except TelegramError as exc:
        return [fail(name, f"getMe failed: {_why(exc)}", "check TELEGRAM_BOT_TOKEN")]
    finally:
        with contextlib.suppress(Exception):
            await bot.shutdown()
    return [ok(name, f"bot token works (@{bot.username})")]


async def check_discord(ctx: DoctorContext) -> list[CheckResult]:
    import discord
    import discord.http

    settings = ctx.settings
    if settings is None or not settings["DISCORD_BOT_TOKEN"]:
        return []
    name, url = "channel discord", settings["DISCORD_API_URL"].rstrip("/")
    http = discord.http.HTTPClient(asyncio.get_running_loop(), aiohttp.TCPConnector(limit=1),
                                   max_ratelimit_timeout=ctx.timeout_s)
    try:
        with _discord_base(url):
            me = await http.static_login(settings["DISCORD_BOT_TOKEN"])
    except discord.LoginFailure:
        return [fail(name, "GET /users/@me refused the bot token (401 Unauthorized)",
                     "reset the token at https://discord.com/developers/applications → your "
                     "app → Bot, and set DISCORD_BOT_TOKEN")]
    except discord.HTTPException as exc:
        return [fail(name, f"GET /users/@me failed (HTTP {exc.status})",
                     "check DISCORD_API_URL and DISCORD_BOT_TOKEN")]
    except UNREACHABLE as exc:
        return [_unreachable(name, "Discord", url, exc, "DISCORD_API_URL")]
    finally:
        await http.close()
    return [ok(name, f"bot token works ({me.get('username', '?')})")]


@contextlib.contextmanager
def _discord_base(url: str) -> Iterator[None]:
    """discord.py keeps its REST base URL on a class (`Route.BASE`); set it for this call only,
    as the Discord channel does for its session."""
    import discord.http

    saved = discord.http.Route.BASE
    discord.http.Route.BASE = url
    try:
        yield
    finally:
        discord.http.Route.BASE = saved


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _unreachable(name: str, platform: str, url: str, exc: BaseException,
                 setting: str) -> CheckResult:
    return fail(name, f"cannot reach {platform} at {url} ({_why(exc)[:160]})",
                f"check the network, a proxy (HTTPS_PROXY) or {setting}")
