"""The doctor's check of the Telegram bot token: `getMe` through python-telegram-bot, on the
API URL and the aiohttp transport the adapter uses."""

from __future__ import annotations

import contextlib

from soulflow.channels.probe import ProbeOutcome, TokenProbe, describe


async def probe_telegram(token: str, api_url: str, timeout_s: float) -> TokenProbe:
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, TelegramError

    from soulflow.channels.telegram.http import AiohttpRequest

    request = AiohttpRequest(pool_size=1, connect_timeout=timeout_s, read_timeout=timeout_s,
                             write_timeout=timeout_s, pool_timeout=timeout_s)
    bot = Bot(token, base_url=f"{api_url.rstrip('/')}/bot", request=request)
    try:
        await bot.initialize()  # calls getMe
    except InvalidToken:
        return TokenProbe(ProbeOutcome.REFUSED, "401 Unauthorized")
    except NetworkError as exc:  # TimedOut is one
        return TokenProbe(ProbeOutcome.UNREACHABLE, describe(exc))
    except TelegramError as exc:
        return TokenProbe(ProbeOutcome.FAILED, describe(exc))
    finally:
        with contextlib.suppress(Exception):
            await bot.shutdown()
    return TokenProbe(ProbeOutcome.OK, f"@{bot.username}")
