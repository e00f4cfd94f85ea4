"""Checks that talk to a platform: each configured channel's token, one real SDK call each.

The calls themselves live with each platform (`soulflow.channels.<platform>.probe`: only the
platform packages may import a platform SDK); this module turns their outcome into a line
with the fix. The runner bounds each check with its timeout and the SDK clients get it too,
so a check that times out closes its connections instead of leaving them behind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from soulflow.channels.discord.probe import probe_discord
from soulflow.channels.probe import ProbeOutcome, TokenProbe
from soulflow.channels.slack.probe import probe_slack_app, probe_slack_bot
from soulflow.channels.telegram.probe import probe_telegram
from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip

SLACK_APPS = "https://api.slack.com/apps"
#: A platform's probe (`soulflow.channels.<platform>.probe`): (token, API URL, timeout) ->
#: outcome.
Prober = Callable[[str, str, float], Awaitable[TokenProbe]]


async def check_channels(ctx: DoctorContext) -> list[CheckResult]:
    """Skip line when no platform channel is configured (the local channel needs no token)."""
    if ctx.settings is None:
        return [skip("channels", "settings are invalid")]
    if any(ctx.settings[n] for n in ("SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN",
                                     "DISCORD_BOT_TOKEN")):
        return []
    return [skip("channels", "no platform channel configured (the local channel needs no "
                             "token)")]


def _line(name: str, probe: TokenProbe, *, what: str, call: str, platform: str, url: str,
          url_setting: str, token_fix: str) -> CheckResult:
    if probe.outcome is ProbeOutcome.OK:
        return ok(name, f"{what} works ({probe.detail})")
    if probe.outcome is ProbeOutcome.REFUSED:
        return fail(name, f"{call} refused the {what} ({probe.detail})", token_fix)
    if probe.outcome is ProbeOutcome.UNREACHABLE:
        return fail(name, f"cannot reach {platform} at {url} ({probe.detail})",
                    f"check the network, a proxy (HTTPS_PROXY) or {url_setting}")
    return fail(name, f"{call} failed ({probe.detail})", f"check {url_setting} and the token")


async def check_slack(ctx: DoctorContext) -> list[CheckResult]:
    settings = ctx.settings
    if settings is None or not settings["SLACK_BOT_TOKEN"]:
        return []
    url = settings["SLACK_API_URL"].rstrip("/") + "/"
    common = {"platform": "Slack", "url": url, "url_setting": "SLACK_API_URL"}
    probe = await probe_slack_bot(settings["SLACK_BOT_TOKEN"], url, ctx.timeout_s)
    results = [_line("channel slack", probe, what="bot token", call="auth.test",
                     token_fix=f"copy the Bot User OAuth Token (xoxb-…) from {SLACK_APPS} → "
                               "your app → OAuth & Permissions into SLACK_BOT_TOKEN", **common)]
    if settings["SLACK_APP_TOKEN"] and probe.outcome is ProbeOutcome.OK:
        app = await probe_slack_app(settings["SLACK_APP_TOKEN"], url, ctx.timeout_s)
        results.append(_line(
            "channel slack socket", app, what="app token", call="apps.connections.open",
            token_fix=f"create an app-level token with connections:write at {SLACK_APPS} → "
                      "Basic Information, enable Socket Mode, and set it as SLACK_APP_TOKEN",
            **common))
    return results


async def _bot_token_check(ctx: DoctorContext, platform: str, probe: Prober, *, call: str,
                           token_fix: str) -> list[CheckResult]:
    """Telegram and Discord: one bot token (``<PLATFORM>_BOT_TOKEN``) checked by one SDK call
    against ``<PLATFORM>_API_URL``; no line when the token is not set."""
    settings = ctx.settings
    token_setting, url_setting = f"{platform.upper()}_BOT_TOKEN", f"{platform.upper()}_API_URL"
    if settings is None or not settings[token_setting]:
        return []
    url = settings[url_setting].rstrip("/")
    result = await probe(settings[token_setting], url, ctx.timeout_s)
    return [_line(f"channel {platform.lower()}", result, what="bot token", call=call,
                  platform=platform, url=url, url_setting=url_setting, token_fix=token_fix)]


async def check_telegram(ctx: DoctorContext) -> list[CheckResult]:
    return await _bot_token_check(
        ctx, "Telegram", probe_telegram, call="getMe",
        token_fix="get the token from @BotFather (/token) and set TELEGRAM_BOT_TOKEN")


async def check_discord(ctx: DoctorContext) -> list[CheckResult]:
    return await _bot_token_check(
        ctx, "Discord", probe_discord, call="GET /users/@me",
        token_fix="reset the token at https://discord.com/developers/applications → "
                  "your app → Bot, and set DISCORD_BOT_TOKEN")
