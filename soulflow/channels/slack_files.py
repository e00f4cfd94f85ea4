"""Downloading files users share in Slack: the token goes only to Slack's own hosts.

Split from `slack.py` so the adapter stays about messages; these are plain functions over
the adapter's aiohttp session.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp


def trusted_file_host(url: str, api_url: str) -> bool:
    """Slack's hosts (or the configured API host, for proxies and tests): never send the bot
    token anywhere else, whatever URL an event carries."""
    host = (urlsplit(url).hostname or "").lower()
    api_host = (urlsplit(api_url).hostname or "").lower()
    return bool(host) and (host == api_host or host == "slack.com"
                           or host.endswith(".slack.com"))


async def fetch_file(session: aiohttp.ClientSession, url: str, *, token: str, label: str,
                     mime_type: str | None, limit: int) -> bytes:
    """The file's bytes, at most `limit`; OSError says why not (HTTP error, login page
    instead of the file when the token lacks files:read, too large, network)."""
    data = bytearray()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.get(url, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=300)) as resp:
            if resp.status != 200:
                raise OSError(f"Slack answered HTTP {resp.status} for file {label!r}")
            if resp.content_type == "text/html" and mime_type != "text/html":
                raise OSError(f"Slack served a login page instead of {label!r}: the bot "
                              "token needs the files:read scope")
            async for chunk in resp.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    raise OSError(f"Slack file {label!r} exceeds the {limit:,}-byte limit")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OSError(f"download of {label!r} failed: {exc}") from None
    return bytes(data)
