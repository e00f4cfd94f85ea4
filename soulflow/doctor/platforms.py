"""Checks that talk to a platform: each configured channel's token, one real SDK call each.

The calls themselves live with the channels (`soulflow.channels.probe`, the only place that
may import a platform SDK); this module turns their outcome into a line with the fix. The
runner bounds each check with its timeout and the SDK clients get it too, so a check that
times out closes its connections instead of leaving them behind.
"""

from __future__ import annotations

from soulflow.channels.probe import (
    ProbeOutcome,
    TokenProbe,
    probe_discord,
    probe_slack_app,
    probe_slack_bot,
    probe_telegram,
)
from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip

SLACK_APPS = "https://api.slack.com/apps"


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


async def check_telegram(ctx: DoctorContext) -> list[CheckResult]:
    settings = ctx.settings
    if settings is None or not settings["TELEGRAM_BOT_TOKEN"]:
        return []
    url = settings["TELEGRAM_API_URL"].rstrip("/")
    probe = await probe_telegram(settings["TELEGRAM_BOT_TOKEN"], url, ctx.timeout_s)
    return [_line("channel telegram", probe, what="bot token", call="getMe", platform="Telegram",
                  url=url, url_setting="TELEGRAM_API_URL",
                  token_fix="get the token from @BotFather (/token) and set TELEGRAM_BOT_TOKEN")]


async def check_discord(ctx: DoctorContext) -> list[CheckResult]:
    settings = ctx.settings
    if settings is None or not settings["DISCORD_BOT_TOKEN"]:
        return []
    url = settings["DISCORD_API_URL"].rstrip("/")
    probe = await probe_discord(settings["DISCORD_BOT_TOKEN"], url, ctx.timeout_s)
    return [_line("channel discord", probe, what="bot token", call="GET /users/@me",
                  platform="Discord", url=url, url_setting="DISCORD_API_URL",
                  token_fix="reset the token at https://discord.com/developers/applications → "
                            "your app → Bot, and set DISCORD_BOT_TOKEN")]
