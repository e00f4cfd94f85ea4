"""The doctor's check of the Discord bot token: `GET /users/@me` through discord.py, on the
API URL the adapter uses."""

from __future__ import annotations

import asyncio

import aiohttp

from soulflow.channels.probe import UNREACHABLE_ERRORS, ProbeOutcome, TokenProbe, describe


async def probe_discord(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    import discord

    from soulflow.channels.discord.http import RoutedHTTPClient

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
        return TokenProbe(ProbeOutcome.UNREACHABLE, describe(exc))
    finally:
        await http.close()
    return TokenProbe(ProbeOutcome.OK, str(me.get("username", "?")))
