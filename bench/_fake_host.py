"""One platform fake in its own process, driven by JSON lines on stdin (bench only).

The burst bench measures the daemon's CPU with psutil; a fake in the same process (or the
bench's own) would blur that, so each fake runs here, alone. Protocol: the first stdout line
is ``READY {"env": {...}}`` (what the daemon needs to reach the fake); then each stdin line
``{"cmd": ..., ...}`` gets one stdout line ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": ...}``. Commands: ``ready``, ``burst``, ``post``, ``fault``,
``stats``, ``calls`` (API calls per method), ``delivered`` (which burst messages the bot's
replies in their chat answer, as the platform received them), ``tally`` (for the soak: of
the numbered messages posted, how many a reply echoes once, more than once, or not yet).
EOF on stdin stops the fake.

    python -m bench._fake_host --platform telegram --chats 20 [--no-limits]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.discord_api import FakeDiscord  # noqa: E402
from tests.fakes.rate_limits import SLACK_LIMITS, TELEGRAM_LIMITS  # noqa: E402
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack  # noqa: E402
from tests.fakes.slack_objects import BOT_USER_ID  # noqa: E402
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram  # noqa: E402

JSON = dict[str, Any]


class TelegramHost:
    """Supergroups ``-100300000000<i>``; one allowed user mentions the bot in each."""

    user = 111111
    username = "soulflow_test_bot"

    def __init__(self, chats: int, limits: bool) -> None:
        self.fake = FakeTelegram(limits=TELEGRAM_LIMITS if limits else TELEGRAM_LIMITS.relaxed())
        self.chats = [-1003000000000 - i for i in range(1, chats + 1)]

    async def start(self) -> JSON:
        await self.fake.start()
        for chat in self.chats:
            self.fake.add_chat(chat, "supergroup", title=f"bench {chat}")
        return {"TELEGRAM_API_URL": self.fake.url, "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
                "TELEGRAM_ALLOWED_USERS": str(self.user)}

    def ready(self) -> bool:  # long polling has begun (the priming read is over)
        return any(r.method == "getUpdates" and r.params.get("timeout")
                   for r in self.fake.requests)

    def post(self, index: int, text: str) -> None:
        chat = self.chats[index % len(self.chats)]
        self.fake.push_message(chat, f"@{self.username} {text}", from_id=self.user,
                               chat_type="supergroup")

    def fault(self, kind: str) -> None:
        if kind == "500":
            self.fake.fail_next("sendMessage", 500)
        elif kind == "429":
            self.fake.fail_next("sendMessage", 429, retry_after=1)
        elif kind == "drop":
            self.fake.drop_long_polls()

    def replies_in(self, index: int) -> list[str]:
        return self.fake.sent_texts(self.chats[index])

    def stats(self) -> JSON:
        replied = {(m["chat"]["id"], m["reply_to_message"]["message_id"])
                   for m in self.fake.sent_messages if m.get("reply_to_message")}
        return {**self.fake.stats(), "replied_to": len(replied),
                "send_methods": ["sendMessage", "sendDocument", "sendPhoto"]}

    async def stop(self) -> None:
        await self.fake.stop()


class SlackHost:
    """Channels ``C0BENCH<i>`` over Socket Mode; Slack replies carry no reply-to."""

    user = "U0HUMAN001"

    def __init__(self, chats: int, limits: bool) -> None:
        self.fake = FakeSlack(limits=SLACK_LIMITS if limits else SLACK_LIMITS.relaxed(),
                              echo_bot_events=False)
        self.chats = [f"C0BENCH{i:03d}" for i in range(chats)]

    async def start(self) -> JSON:
        await self.fake.start()
        for chat in self.chats:
            self.fake.add_channel(chat, f"bench-{chat.lower()}")
        return {"SLACK_API_URL": self.fake.base_url, "SLACK_BOT_TOKEN": BOT_TOKEN,
                "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_ALLOWED_USERS": self.user}

    def ready(self) -> bool:
        return self.fake.connection_count > 0

    def post(self, index: int, text: str) -> None:
        chat = self.chats[index % len(self.chats)]
        self.fake.post_user_message(chat, f"<@{BOT_USER_ID}> {text}", self.user)

    def fault(self, kind: str) -> None:
        if kind == "500":
            self.fake.fail_next("chat.postMessage", "internal_error", status=500)
        elif kind == "429":
            self.fake.fail_next("chat.postMessage", retry_after=1)
        elif kind == "drop":
            self.fake.drop_sockets()

    def replies_in(self, index: int) -> list[str]:
        return self.fake.bot_texts(self.chats[index])

    def stats(self) -> JSON:
        return {**self.fake.stats(), "replied_to": None, "send_methods": ["chat.postMessage"]}

    async def stop(self) -> None:
        await self.fake.stop()


class DiscordHost:
    """Guild text channels ``bench-<i>``; alice mentions the bot."""

    def __init__(self, chats: int, limits: bool) -> None:
        self.fake = FakeDiscord(channel_names=tuple(f"bench-{i}" for i in range(chats)),
                                user_names=("alice",), enforce_limits=limits)
        self.chats: list[int] = []  # snowflakes, known once the fake has started

    async def start(self) -> JSON:
        await self.fake.start()
        ids = self.fake.channel_ids
        self.chats = [ids[f"bench-{i}"] for i in range(len(ids))]
        return {"DISCORD_API_URL": self.fake.api_url,
                "DISCORD_GATEWAY_URL": self.fake.gateway_url,
                "DISCORD_BOT_TOKEN": self.fake.token,
                "DISCORD_ALLOWED_USERS": str(self.fake.user_ids["alice"])}

    def ready(self) -> bool:
        return self.fake.gateway.has_live_session()

    def post(self, index: int, text: str) -> None:
        chat = self.chats[index % len(self.chats)]
        self.fake.push_message(chat, text, self.fake.user_ids["alice"], mentions_bot=True)

    def fault(self, kind: str) -> None:
        if kind == "500":
            self.fake.fail_next("send_message", 500)
        elif kind == "429":
            self.fake.fail_next("send_message", 429, retry_after=1.0)
        elif kind == "drop":
            self.fake.drop_connection()

    def replies_in(self, index: int) -> list[str]:
        return [m.message.get("content", m.content) or "" for m in self.fake.sent_messages
                if m.channel_id == self.chats[index]]  # as edited since (a streamed reply)

    def stats(self) -> JSON:
        replied = {(m.channel_id, m.reply_to) for m in self.fake.sent_messages if m.reply_to}
        return {**self.fake.stats(), "replied_to": len(replied), "send_methods": ["send_message"]}

    async def stop(self) -> None:
        await self.fake.stop()


HOSTS = {"telegram": TelegramHost, "slack": SlackHost, "discord": DiscordHost}
Host = TelegramHost | SlackHost | DiscordHost


def delivered(host: Host, prefix: str, start: int, messages: int) -> JSON:
    """Burst messages ``"<prefix> <index>"`` whose text appears in a reply the platform
    accepted in their own chat (the fake model echoes what it is asked; a folded turn echoes
    every message it answers). What a user would see, not what the daemon's journal says."""
    pattern = re.compile(rf"\b{re.escape(prefix)} (\d+)\b")
    seen: dict[int, set[int]] = {}
    for chat in range(len(host.chats)):
        seen[chat] = {int(n) for text in host.replies_in(chat) for n in pattern.findall(text)}
    missing = [i for i in range(start, start + messages) if i not in seen[i % len(host.chats)]]
    return {"delivered": messages - len(missing), "missing": missing[:20]}


#: numbers of the soak's messages posted here (`post` with a `number`)
POSTED: set[int] = set()


def tally(host: Host, prefix: str, full: bool = False) -> JSON:
    """How often the platform received a reply echoing each numbered message posted here:
    `answered` (at least once), `duplicates` (more than once), `missing` (not yet: lost only
    once the daemon has settled). The echoing fake model repeats what it answers, and a
    folded turn repeats every message it answers, so each message's number appears once."""
    pattern = re.compile(rf"\b{re.escape(prefix)} (\d+)\b")
    counts: dict[int, int] = {}
    for chat in range(len(host.chats)):
        for text in host.replies_in(chat):
            for number in {int(n) for n in pattern.findall(text)}:
                counts[number] = counts.get(number, 0) + 1
    missing = sorted(n for n in POSTED if n not in counts)
    return {"posted": len(POSTED), "answered": sum(1 for n in POSTED if n in counts),
            "duplicates": sorted(n for n in POSTED if counts.get(n, 0) > 1)[:50],
            "duplicate_count": sum(1 for n in POSTED if counts.get(n, 0) > 1),
            "missing": missing if full else missing[:50], "missing_count": len(missing)}


async def handle(host: Host, request: JSON) -> Any:
    """Run one command on the fake's loop."""
    cmd = request.get("cmd")
    if cmd == "ready":
        return host.ready()
    if cmd == "burst":  # `messages` mentions round-robin over the chats, all at once
        start = int(request.get("start", 0))
        for index in range(start, start + int(request["messages"])):
            host.post(index, f"{request.get('prefix', 'message')} {index}")
        return int(request["messages"])
    if cmd == "post":
        host.post(int(request["index"]), str(request["text"]))
        if (number := request.get("number")) is not None:
            POSTED.add(int(number))
        return True
    if cmd == "tally":
        return tally(host, str(request.get("prefix", "soak")), bool(request.get("full")))
    if cmd == "fault":
        host.fault(str(request["kind"]))
        return True
    if cmd == "stats":
        return host.stats()
    if cmd == "replies":  # the bot's messages in chat `index`, as they read now
        return host.replies_in(int(request["index"]))
    if cmd == "calls":  # API calls received so far, per method (Discord: per route name)
        counts: dict[str, int] = {}
        for request in host.fake.requests:
            method = str(getattr(request, "name", None) or getattr(request, "method", ""))
            counts[method] = counts.get(method, 0) + 1
        return counts
    if cmd == "delivered":
        return delivered(host, str(request.get("prefix", "message")),
                         int(request.get("start", 0)), int(request["messages"]))
    raise ValueError(f"unknown command {cmd!r}")


async def serve(platform: str, chats: int, limits: bool) -> None:
    # A client that cancels a request mid-body is normal load here, not news for the bench.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    host: Host = HOSTS[platform](chats, limits)
    env = await host.start()
    print("READY " + json.dumps({"env": env}), flush=True)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            try:
                reply: JSON = {"ok": True, "result": await handle(host, json.loads(line))}
            except Exception as exc:  # reported to the bench, which decides
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)
    finally:
        await host.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=sorted(HOSTS), required=True)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--no-limits", action="store_true")
    args = parser.parse_args()
    asyncio.run(serve(args.platform, args.chats, not args.no_limits))


if __name__ == "__main__":
    main()
