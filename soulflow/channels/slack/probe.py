"""The doctor's check of Slack tokens: `auth.test` for the bot token, `apps.connections.open`
for a Socket Mode app token (it only hands out a URL), on the API URL the adapter uses."""

from __future__ import annotations

import aiohttp

from soulflow.channels.probe import UNREACHABLE_ERRORS, ProbeOutcome, TokenProbe, describe


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
            return TokenProbe(ProbeOutcome.UNREACHABLE, describe(exc))
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
            return TokenProbe(ProbeOutcome.UNREACHABLE, describe(exc))
    return TokenProbe(ProbeOutcome.OK, "Socket Mode")
