"""One test-side driver per chat platform, so the platform e2e tests read the same for all.

Each driver starts its loopback fake (Slack Web API + Socket Mode, Telegram Bot API,
Discord REST + gateway) on a background thread and exposes what a test needs in platform
terms: the daemon's environment, "a user posts / reacts", "the next sends fail with 429",
malformed input, and the bot's posts normalised to `BotPost`. Only the fakes' public
test-side API is used, plus a few direct calls on the fake's own loop for things the
thread runners do not wrap (history that was never delivered as an event, raw envelopes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from tests.e2e.harness import Daemon, wait_for
from tests.fakes.discord_api import FakeDiscordThread
from tests.fakes.rate_limits import SLACK_LIMITS, TELEGRAM_LIMITS
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlackThread
from tests.fakes.slack_objects import BOT_USER_ID, user_message
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread
from tests.fakes.telegram_objects import REACTION_EMOJI

ONE_MB = 1_000_000
#: Slack reports reactions by name; the names of the emoji SoulFlow suggests in prompts.
SLACK_EMOJI_NAMES = {"✅": "white_check_mark", "❌": "x", "⏸": "double_vertical_bar",
                     "🚫": "no_entry_sign", "👍": "+1", "👎": "-1", "🤔": "thinking_face"}


@dataclass(frozen=True)
class Posted:
    """A message a (fake) user posted: where, and its platform id."""

    chat: str
    id: str
    thread: str | None = None


@dataclass(frozen=True)
class BotPost:
    """A message the bot sent, as the platform recorded it.

    `thread`: Slack thread_ts / Telegram message_thread_id. `reply_to`: the message it
    replies to (Telegram reply, Discord message reference). `file`: (name, bytes) of an
    attached file; `text` is then the file's caption/comment.
    """

    id: str
    chat: str
    text: str
    thread: str | None = None
    reply_to: str | None = None
    file: tuple[str, bytes] | None = None


class Driver:
    """What every platform driver offers (see the subclasses for the platform details)."""

    name: str
    text_limit: int  # the platform's hard message limit, in characters
    approve_emoji: str  # the approval prompt's ✅ as the platform names it
    thumbs_up: str = "👍"  # also approves; the only approve emoji Telegram users can add
    user: str  # an allowed user
    stranger: str  # a user not on the allow-list
    chat: str  # a group chat / channel where the bot must be mentioned
    dm: str  # a direct chat with `user`

    def __enter__(self) -> Driver:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def wait_ready(self, daemon: Daemon) -> None:
        """The daemon's adapter is connected and reads live messages."""
        def connected() -> bool:
            channels = daemon.state()["channels"]
            return any(c["name"] == self.name and c.get("status") == "connected"
                       for c in channels)
        wait_for(connected, 30, what=f"the {self.name} channel to connect")

    def post(self, text: str, *, user: str | None = None, chat: str | None = None,
             thread: str | None = None, mention: bool = True) -> Posted:
        raise NotImplementedError

    def post_as_bot(self, text: str, *, own: bool) -> Posted:
        """A message by this bot itself (`own`) or by another bot, mentioning this one."""
        raise NotImplementedError

    def post_file(self, text: str, name: str, data: bytes, *, chat: str | None = None
                  ) -> Posted:
        """The allowed user sends a file called `name` with `text` (its caption / comment,
        mentioning the bot in a group) to `chat`, the way the platform delivers one."""
        raise NotImplementedError

    def seed_history(self, text: str) -> None:
        """A message that exists before the daemon's first start (delivered as history only)."""
        raise NotImplementedError

    def react(self, post: BotPost, emoji: str, *, user: str | None = None) -> None:
        raise NotImplementedError

    def reaction_for(self, emoji: str) -> str | None:
        """What the platform reports when a user reacts with `emoji`; None if users cannot."""
        return emoji

    def feedback(self, posted: Posted) -> set[str]:
        """What the bot showed while working on `posted`: "read-ack" (its 👀 reaction on
        the message) and/or "typing" (a typing indicator in the chat)."""
        raise NotImplementedError

    def fail_sends(self, count: int) -> None:
        """Answer the next `count` send calls with HTTP 429, retry after 1 s."""
        raise NotImplementedError

    def send_attempts(self) -> int:
        """Send calls the fake has received so far (failed ones included)."""
        raise NotImplementedError

    def hold_next_send(self, seconds: float) -> None:
        """Hold the next send call this long before the platform accepts it (the fake
        finishes it even if the client has gone)."""
        raise NotImplementedError

    def fail_edits(self, count: int) -> None:
        """Answer the next `count` message edits with HTTP 429, retry after 1 s."""
        raise NotImplementedError

    def edit_attempts(self) -> int:
        """Message edits the fake has received so far (failed ones included)."""
        raise NotImplementedError

    def malformed(self) -> None:
        """Inject events with missing fields and of unknown types, then a 1 MB message from
        the allowed user."""
        raise NotImplementedError

    def posts(self, chat: str | None = None) -> list[BotPost]:
        raise NotImplementedError

    def approval_remembered(self, daemon: Daemon, post: BotPost) -> bool:
        """The daemon has recorded which approval `post` announces, so a reaction on it
        counts (`runtime/approvals/messages.json` maps `provider:chat:platform id`)."""
        path = daemon.workspace / "runtime" / "approvals" / "messages.json"
        try:
            return f"{self.name}:{post.chat}:{post.id}" in json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return False


# -- Slack ---------------------------------------------------------------------------------


class SlackDriver(Driver):
    name = "slack"
    text_limit = 40_000  # chat.postMessage's hard limit; SoulFlow splits at 3,500
    approve_emoji = "white_check_mark"
    thumbs_up = "+1"
    user = "U0HUMAN001"
    stranger = "U0STRANGER"
    chat = "C0GENERAL1"
    dm = "D0HUMAN001"  # the fake names a DM "D" + the user id without its "U"

    def __init__(self, *, socket: bool = True, poll_interval_ms: int = 200,
                 paced: bool = True) -> None:
        self.socket = socket
        self.poll_interval_ms = poll_interval_ms
        # Polling every 200 ms keeps these tests short; Slack's Tier 3 (50 reads a minute)
        # would refuse it after ten seconds and the poller would wait out the minute. The
        # poller under those limits is tested in tests/channels/test_slack_adapter.py, so
        # here, and only here, the read methods' tiers are lifted (`paced=False` lifts
        # every limit: tests about other things that post a lot).
        limits = SLACK_LIMITS if socket else replace(SLACK_LIMITS, per_method={
            method: limit for method, limit in SLACK_LIMITS.per_method.items()
            if method not in ("conversations.history", "conversations.replies")})
        self.runner = FakeSlackThread(limits=limits if paced else SLACK_LIMITS.relaxed())

    def __enter__(self) -> SlackDriver:
        self.runner.start()
        self.runner.call(self.runner.fake.im_channel, self.user)  # the user's DM exists
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop()

    def env(self) -> dict[str, str]:
        env = {"SLACK_API_URL": self.runner.base_url, "SLACK_BOT_TOKEN": BOT_TOKEN,
               "SLACK_ALLOWED_USERS": self.user}
        if self.socket:
            env["SLACK_APP_TOKEN"] = APP_TOKEN
        else:
            env.update(SLACK_DEFAULT_CHANNEL=self.chat,
                       SLACK_POLL_INTERVAL_MS=str(self.poll_interval_ms))
        return env

    def wait_ready(self, daemon: Daemon) -> None:
        super().wait_ready(daemon)
        if self.socket:
            wait_for(lambda: self.runner.call(lambda: self.runner.fake.connection_count) > 0,
                     what="a Socket Mode connection")
        else:  # the priming poll has run: everything posted from now on is new
            wait_for(lambda: len([r for r in self.runner.requests
                                  if r.method == "conversations.history"]) >= 2,
                     what="two history polls")

    def post(self, text: str, *, user: str | None = None, chat: str | None = None,
             thread: str | None = None, mention: bool = True) -> Posted:
        chat = chat or self.chat
        body = f"<@{BOT_USER_ID}> {text}" if mention and not chat.startswith("D") else text
        message = self.runner.post_user_message(chat, body, user or self.user, thread)
        return Posted(chat, message["ts"], thread)

    def post_file(self, text: str, name: str, data: bytes, *, chat: str | None = None
                  ) -> Posted:
        chat = chat or self.chat
        body = text if chat.startswith("D") else f"<@{BOT_USER_ID}> {text}"
        message = self.runner.post_user_message(chat, body, self.user, files=[(name, data)])
        return Posted(chat, message["ts"])

    def post_as_bot(self, text: str, *, own: bool) -> Posted:
        def inject() -> str:
            fake = self.runner.fake
            ts = fake.clock.next()
            event: dict[str, Any] = {"type": "message", "channel": self.chat, "ts": ts,
                                     "event_ts": ts, "channel_type": "channel",
                                     "text": f"<@{BOT_USER_ID}> {text}"}
            if own:
                event.update(user=BOT_USER_ID, bot_id="B0FAKEBOT1")
            else:
                event.update(user="U0OTHERBOT", bot_id="B0OTHERBOT")
            fake.history[self.chat].append(dict(event))
            fake.push_event(event)
            return ts
        return Posted(self.chat, self.runner.call(inject))

    def seed_history(self, text: str) -> None:
        def inject() -> None:
            fake = self.runner.fake
            fake.add_user(self.user)
            message = user_message(self.user, f"<@{BOT_USER_ID}> {text}", fake.clock.next(),
                                   None, None)
            fake._append(self.chat, message)  # history only: no event is pushed
        self.runner.call(inject)

    def react(self, post: BotPost, emoji: str, *, user: str | None = None) -> None:
        self.runner.add_reaction_event(post.chat, post.id, user or self.user, emoji)

    def reaction_for(self, emoji: str) -> str | None:
        return SLACK_EMOJI_NAMES.get(emoji.rstrip("\ufe0f"))

    def feedback(self, posted: Posted) -> set[str]:
        fake = self.runner.fake
        reactions = self.runner.call(lambda: fake._find(posted.chat, posted.id).get(
            "reactions", []))
        eyes = any(r["name"] == "eyes" and BOT_USER_ID in r["users"] for r in reactions)
        return {"read-ack"} if eyes else set()  # Slack has no typing indicator for bots

    def fail_sends(self, count: int) -> None:
        self.runner.fail_next("chat.postMessage", status=429, retry_after=1, count=count)

    def send_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.method == "chat.postMessage"])

    def hold_next_send(self, seconds: float) -> None:
        self.runner.delay_next("chat.postMessage", seconds)

    def fail_edits(self, count: int) -> None:
        self.runner.fail_next("chat.update", status=429, retry_after=1, count=count)

    def edit_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.method == "chat.update"])

    def malformed(self) -> None:
        envelopes: list[dict[str, Any]] = [
            {"type": "events_api", "envelope_id": "bad-1", "payload": {}},
            {"type": "events_api", "envelope_id": "bad-2", "payload": {"event": "nope"}},
            {"type": "events_api", "envelope_id": "bad-3",
             "payload": {"event": {"type": "message"}}},  # no channel, user, ts, text
            {"type": "events_api", "envelope_id": "bad-4",
             "payload": {"event": {"type": "message", "channel": self.chat, "user": self.user,
                                   "ts": 12, "text": ["not", "text"]}}},
            {"type": "events_api", "envelope_id": "bad-5",
             "payload": {"event": {"type": "reaction_added", "user": self.user}}},
            {"type": "events_api", "envelope_id": "bad-6",
             "payload": {"event": {"type": "subteam_created", "subteam": {}}}},
            {"type": "interactive", "envelope_id": "bad-7", "payload": {"type": "shortcut"}},
            {"type": "from_the_future", "envelope_id": "bad-8"},
            {"no": "type at all"},
        ]
        for envelope in envelopes:
            self.runner.call(self.runner.fake.push_envelope, envelope)
        self.post("x" * ONE_MB)

    def posts(self, chat: str | None = None) -> list[BotPost]:
        fake = self.runner.fake  # one snapshot: an upload is recorded after its message
        messages, uploads_list = self.runner.call(lambda: (fake.messages, fake.uploads))
        uploads = {u.file_id: u for u in uploads_list}
        found = []
        for posted in messages:
            if posted.deleted or chat not in (None, posted.channel):
                continue
            message = posted.message
            file = None
            for entry in message.get("files") or []:
                upload = uploads.get(entry["id"])
                if upload is not None:
                    file = (upload.filename, upload.data)
            found.append(BotPost(posted.ts, posted.channel, posted.text,
                                 thread=message.get("thread_ts"), file=file))
        return found


# -- Telegram --------------------------------------------------------------------------------


class TelegramDriver(Driver):
    name = "telegram"
    text_limit = 4096
    approve_emoji = "✅"
    bot_username = "soulflow_test_bot"
    user = "111111"
    stranger = "999999"
    chat = "-1002000000001"  # a forum supergroup (topics = threads)
    dm = "111111"  # a private chat's id is the user's id

    def __init__(self, *, paced: bool = True) -> None:
        # The platform tests share one group per module and post far more than Telegram's 20
        # messages a minute there; at that limit the daemon would wait out most of a minute
        # between tests. Replies under the group limit are tested with the defaults where
        # that is the point (tests/tasks/test_task_status_edits.py, the bench smoke test's
        # supergroups, tests/test_fake_limits.py); here only the group window is lifted, the
        # 1/s per chat stays (`paced=False` lifts every limit).
        limits = replace(TELEGRAM_LIMITS, per_group=None)
        self.runner = FakeTelegramThread(limits=limits if paced else TELEGRAM_LIMITS.relaxed())

    def __enter__(self) -> TelegramDriver:
        self.runner.start()
        self.runner.add_chat(int(self.chat), "supergroup", title="team", is_forum=True)
        self.runner.add_chat(int(self.dm), "private")  # the user has started the bot
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop()

    def env(self) -> dict[str, str]:
        return {"TELEGRAM_API_URL": self.runner.url, "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
                "TELEGRAM_ALLOWED_USERS": self.user, "CHANNEL_POLL_TIMEOUT_S": "1"}

    def wait_ready(self, daemon: Daemon) -> None:
        super().wait_ready(daemon)

        def long_polling() -> bool:  # the first-start priming read (timeout 0) is over
            return any(r.method == "getUpdates" and r.params.get("timeout")
                       for r in self.runner.requests)
        wait_for(long_polling, what="a getUpdates long poll")

    def _bot_id(self) -> int:
        return int(DEFAULT_TOKEN.partition(":")[0])

    def post(self, text: str, *, user: str | None = None, chat: str | None = None,
             thread: str | None = None, mention: bool = True) -> Posted:
        chat = chat or self.chat
        sender = int(user or self.user)
        if chat == self.dm and user not in (None, self.user):
            chat = str(sender)  # a stranger's private chat is their own
        group = int(chat) < 0
        body = f"@{self.bot_username} {text}" if mention and group else text
        update = self.runner.push_message(
            int(chat), body, from_id=sender, chat_type="supergroup" if group else "private",
            message_thread_id=int(thread) if thread else None)
        return Posted(chat, str(update["message"]["message_id"]), thread)

    def post_file(self, text: str, name: str, data: bytes, *, chat: str | None = None
                  ) -> Posted:
        chat = chat or self.chat
        group = int(chat) < 0
        caption = f"@{self.bot_username} {text}" if group else text
        update = self.runner.push_message(
            int(chat), caption, from_id=int(self.user),
            chat_type="supergroup" if group else "private", document=(name, data))
        return Posted(chat, str(update["message"]["message_id"]))

    def post_as_bot(self, text: str, *, own: bool) -> Posted:
        sender = self._bot_id() if own else 5_555_555

        def mark_bot() -> None:
            self.runner.fake.add_user(sender, "OtherBot", username="other_bot")
            self.runner.fake.users[sender]["is_bot"] = True
        self.runner.call(mark_bot)
        update = self.runner.push_message(int(self.chat), f"@{self.bot_username} {text}",
                                          from_id=sender, chat_type="supergroup")
        return Posted(self.chat, str(update["message"]["message_id"]))

    def seed_history(self, text: str) -> None:
        self.post(text)  # an update queued before the first getUpdates

    def react(self, post: BotPost, emoji: str, *, user: str | None = None) -> None:
        self.runner.push_reaction(int(post.chat), int(post.id), int(user or self.user), emoji)

    def feedback(self, posted: Posted) -> set[str]:
        fake = self.runner.fake
        reactions, actions = self.runner.call(lambda: (fake.bot_reactions, fake.chat_actions))
        shown = set()
        if any(r["chat_id"] == int(posted.chat) and r["message_id"] == int(posted.id)
               and r["reaction"] == [{"type": "emoji", "emoji": "👀"}] for r in reactions):
            shown.add("read-ack")
        if any(a["chat_id"] == int(posted.chat) and a["action"] == "typing" for a in actions):
            shown.add("typing")
        return shown

    def reaction_for(self, emoji: str) -> str | None:
        # users may only react with Telegram's fixed list (custom emoji are not decisions)
        return emoji if emoji in REACTION_EMOJI or f"{emoji}\ufe0f" in REACTION_EMOJI else None

    def fail_sends(self, count: int) -> None:
        self.runner.fail_next("sendMessage", 429, retry_after=1, count=count)

    def send_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.method == "sendMessage"])

    def hold_next_send(self, seconds: float) -> None:
        self.runner.delay_next("sendMessage", seconds)

    def fail_edits(self, count: int) -> None:
        self.runner.fail_next("editMessageText", 429, retry_after=1, count=count)

    def edit_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.method == "editMessageText"])

    def malformed(self) -> None:
        chat = self.runner.add_chat(int(self.chat), "supergroup")
        updates: list[dict[str, Any]] = [
            {"update_id": 900_000_001, "message": {"message_id": 77}},  # no chat, date, from
            {"update_id": 900_000_002, "message": "not an object"},
            {"update_id": 900_000_003, "message": {"message_id": 78, "date": 0, "chat": chat,
                                                   "from": {"id": "nan"}, "text": 5}},
            {"update_id": 900_000_004},  # no payload at all
            {"update_id": 900_000_005, "message_reaction": {"chat": chat}},
            {"update_id": "not-a-number", "message": {"message_id": 79}},
        ]
        for update in updates:
            self.runner.push_raw_update(update)
        self.post("x" * ONE_MB)

    def posts(self, chat: str | None = None) -> list[BotPost]:
        fake = self.runner.fake  # one snapshot, so a file's message and bytes agree
        messages, sent_files = self.runner.call(lambda: (fake.sent_messages, fake.sent_files))
        files = {f.file_id: f for f in sent_files}
        found = []
        for message in messages:
            chat_id = str(message["chat"]["id"])
            if chat not in (None, chat_id):
                continue
            file = None
            document = message.get("document")
            if document is not None:
                stored = files[document["file_id"]]
                file = (stored.filename, stored.data)
            thread = message.get("message_thread_id")
            reply = message.get("reply_to_message")
            found.append(BotPost(str(message["message_id"]), chat_id,
                                 message.get("text", message.get("caption", "")),
                                 thread=str(thread) if thread else None,
                                 reply_to=str(reply["message_id"]) if reply else None,
                                 file=file))
        return found


# -- Discord ---------------------------------------------------------------------------------


class DiscordDriver(Driver):
    name = "discord"
    text_limit = 2000
    approve_emoji = "✅"

    def __init__(self, *, paced: bool = True) -> None:
        # unpaced: sends fall under the fake's general 50 per second, not 5 per 5 s a channel
        self.runner = FakeDiscordThread() if paced else FakeDiscordThread(route_limits={})

    def __enter__(self) -> DiscordDriver:
        self.runner.__enter__()
        users = self.runner.user_ids
        self.user, self.stranger = str(users["alice"]), str(users["bob"])
        self.chat = str(self.runner.channel_ids["general"])
        self.dm = str(self.runner.call(lambda: self.runner.fake.world.dm_channel(
            int(self.user)).id))
        self.bot_id = int(self.runner.bot_user_id)
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.__exit__()

    def env(self) -> dict[str, str]:
        return {"DISCORD_API_URL": self.runner.api_url,
                "DISCORD_GATEWAY_URL": self.runner.gateway_url,
                "DISCORD_BOT_TOKEN": self.runner.fake.token,
                "DISCORD_ALLOWED_USERS": self.user}

    def post(self, text: str, *, user: str | None = None, chat: str | None = None,
             thread: str | None = None, mention: bool = True) -> Posted:
        chat = chat or self.chat
        message = self.runner.push_message(int(chat), text, int(user or self.user),
                                           mentions_bot=mention and chat != self.dm)
        return Posted(chat, message["id"])

    def post_file(self, text: str, name: str, data: bytes, *, chat: str | None = None
                  ) -> Posted:
        chat = chat or self.chat
        message = self.runner.push_message(int(chat), text, int(self.user),
                                           mentions_bot=chat != self.dm,
                                           attachments=[(name, data)])
        return Posted(chat, message["id"])

    def post_as_bot(self, text: str, *, own: bool) -> Posted:
        author = self.bot_id if own else 4_242_424_242
        message = self.runner.push_message(int(self.chat), text, author, bot=not own,
                                           mentions_bot=True)
        return Posted(self.chat, message["id"])

    def seed_history(self, text: str) -> None:
        def create() -> None:
            world = self.runner.fake.world
            world.build_message(world.channels[int(self.chat)], int(self.user),
                                f"<@{self.bot_id}> {text}", mentions=[self.bot_id])
        self.runner.call(create)  # stored in the channel, never dispatched

    def react(self, post: BotPost, emoji: str, *, user: str | None = None) -> None:
        self.runner.push_reaction(int(post.chat), int(post.id), int(user or self.user), emoji)

    def feedback(self, posted: Posted) -> set[str]:
        shown = set()
        if any(r.channel_id == int(posted.chat) and r.message_id == int(posted.id)
               and r.emoji == "👀" for r in self.runner.reactions):
            shown.add("read-ack")
        if any(t.channel_id == int(posted.chat) for t in self.runner.typing):
            shown.add("typing")
        return shown

    def fail_sends(self, count: int) -> None:
        self.runner.fail_next("send_message", 429, retry_after=1, count=count)

    def send_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.name == "send_message"])

    def hold_next_send(self, seconds: float) -> None:
        self.runner.delay_next("send_message", seconds)

    def fail_edits(self, count: int) -> None:
        self.runner.fail_next("edit_message", 429, retry_after=1, count=count)

    def edit_attempts(self) -> int:
        return len([r for r in self.runner.requests if r.name == "edit_message"])

    def malformed(self) -> None:
        chat = self.chat
        self.runner.push_raw_dispatch("TOTALLY_NEW_EVENT", {"what": "ever"})
        self.runner.push_raw_dispatch("MESSAGE_REACTION_ADD", {"channel_id": chat})
        # a known event without its id: discord.py's parser raises and the client dies
        self.runner.push_raw_dispatch("MESSAGE_CREATE", {"channel_id": chat, "content": "x"})
        self.post("x" * ONE_MB)

    def posts(self, chat: str | None = None) -> list[BotPost]:
        found = []
        for sent in self.runner.sent_messages:
            if chat not in (None, str(sent.channel_id)):
                continue
            file = (sent.files[0].filename, sent.files[0].data) if sent.files else None
            text = sent.message.get("content", sent.content)  # as edited since
            found.append(BotPost(str(sent.id), str(sent.channel_id), text or "",
                                 reply_to=str(sent.reply_to) if sent.reply_to else None,
                                 file=file))
        return found


DRIVERS = {"slack": SlackDriver, "telegram": TelegramDriver, "discord": DiscordDriver}


def make_driver(name: str, *, paced: bool = True) -> Driver:
    """A driver by test id: a platform name, or `slack-polling` (Slack without Socket Mode).
    `paced=False` switches the fake's per-chat send limits off, for tests that post many
    replies to one chat and test something other than pacing."""
    if name == "slack-polling":
        return SlackDriver(socket=False, paced=paced)
    return DRIVERS[name](paced=paced)

