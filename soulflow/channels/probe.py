"""What `soulflow doctor` learns from one read-only call per platform token.

Each platform's call lives in its own package, through its SDK (`channels/slack/probe.py`:
`auth.test`, and `apps.connections.open` for a Socket Mode app token, which only hands out a
URL; `channels/telegram/probe.py`: `getMe`; `channels/discord/probe.py`: `GET /users/@me`),
with the same base URLs the adapters use, so a token or URL the daemon would reject is
rejected there. They all answer with a `TokenProbe`; callers word the advice themselves.
"""

from __future__ import annotations

import asyncio
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


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:200]
