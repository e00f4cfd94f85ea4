"""The fake Slack Web API + Socket Mode, driven by the real slack_sdk / slack_bolt (no mocks).

These tests prove the fake speaks the protocol the SDKs expect, so the Slack channel
adapter can later be tested end to end by pointing slack_sdk at ``FakeSlack.base_url``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import WSCloseCode
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack, FakeSlackThread
from tests.fakes.slack_objects import BOT_ID, BOT_USER_ID
from tests.running import fake_process, running_fixture
from tests.waiting import until

GENERAL = "C0GENERAL1"
HUMAN = "U0HUMAN001"

Listener = Callable[[Any, SocketModeRequest], Awaitable[None]]


fake = running_fixture(FakeSlack)


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)


@pytest.fixture
async def socket_client(fake: FakeSlack) -> AsyncIterator[SocketModeClient]:
    """A real SocketModeClient with a short ping interval so drops are noticed quickly."""
    sm = SocketModeClient(
        app_token=APP_TOKEN,
        web_client=AsyncWebClient(base_url=fake.base_url),
        ping_interval=0.2,
    )
    try:
        yield sm
    finally:
        await sm.close()


def acking_listener(received: list[SocketModeRequest]) -> Listener:
    async def listener(sm: Any, request: SocketModeRequest) -> None:
        received.append(request)
        await sm.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    return listener


# -- Web API -------------------------------------------------------------------------------
async def test_auth_test(client: AsyncWebClient, fake: FakeSlack) -> None:
    response = await client.auth_test()
    assert response["user_id"] == BOT_USER_ID and response["bot_id"] == BOT_ID
    assert fake.requests[-1].method == "auth.test"


@pytest.mark.parametrize(
    ("token", "method", "error"),
    [
        ("xoxb-wrong", "auth.test", "invalid_auth"),
        (None, "auth.test", "not_authed"),
        (APP_TOKEN, "chat.postMessage", "not_allowed_token_type"),
        (BOT_TOKEN, "apps.connections.open", "not_allowed_token_type"),
    ],
)
async def test_auth_errors(fake: FakeSlack, token: str | None, method: str, error: str) -> None:
    with pytest.raises(SlackApiError) as caught:
        await AsyncWebClient(token=token, base_url=fake.base_url).api_call(method)
    assert caught.value.response["error"] == error
    assert caught.value.response.status_code == 200


async def test_unknown_method(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as caught:
        await client.api_call("nope.nothing")
    assert caught.value.response["error"] == "unknown_method"


async def test_post_message_in_thread(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = fake.post_user_message(GENERAL, "question?", HUMAN)
    response = await client.chat_postMessage(
        channel=GENERAL, text="answer", thread_ts=parent["ts"], mrkdwn=True
    )
    assert response["channel"] == GENERAL and response["message"]["thread_ts"] == parent["ts"]
    assert response["message"]["bot_id"] == BOT_ID
    assert response["message"]["parent_user_id"] == HUMAN
    (posted,) = fake.messages
    assert (posted.text, posted.thread_ts, posted.ts) == ("answer", parent["ts"], response["ts"])
    replies = await client.conversations_replies(channel=GENERAL, ts=parent["ts"])
    assert [m["text"] for m in replies["messages"]] == ["question?", "answer"]
    assert replies["messages"][0]["reply_count"] == 1
    history = await client.conversations_history(channel=GENERAL)
    assert [m["text"] for m in history["messages"]] == ["question?"]  # replies stay in thread


async def test_post_message_by_name_and_blocks(client: AsyncWebClient, fake: FakeSlack) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    response = await client.chat_postMessage(channel="#general", text="hi", blocks=blocks)
    assert response["channel"] == GENERAL and response["message"]["blocks"] == blocks
    assert fake.calls("chat.postMessage")[0].params["blocks"] == blocks


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"channel": "C404"}, "channel_not_found"),
        pytest.param(
            {"channel": GENERAL, "text": ""},
            "no_text",
            marks=pytest.mark.filterwarnings("ignore:The top-level `text` argument"),
        ),
        ({"channel": GENERAL, "text": "x", "blocks": [{"no": "type"}]}, "invalid_blocks"),
        ({"channel": "CNOTMEMBR", "text": "x"}, "not_in_channel"),
        ({"channel": GENERAL, "text": "x" * 40_001}, "msg_too_long"),
        ({"channel": GENERAL, "metadata": {"event_type": "x y", "event_payload": {}}},
         "invalid_metadata_schema"),
        ({"channel": GENERAL, "metadata": {"event_type": "ok"}}, "invalid_metadata_schema"),
        ({"channel": GENERAL, "metadata": "{not json"}, "invalid_metadata_format"),
    ],
)
async def test_post_message_errors(
    client: AsyncWebClient, fake: FakeSlack, kwargs: dict[str, Any], error: str
) -> None:
    fake.add_channel("CNOTMEMBR", "private-ish", bot_member=False)
    kwargs.setdefault("text", "hello")
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(**kwargs)
    assert caught.value.response["error"] == error


async def test_message_metadata_is_stored_and_read_back_only_when_asked(
        client: AsyncWebClient, fake: FakeSlack) -> None:
    """chat.postMessage keeps `metadata`; conversations.history/replies return its payload
    with `include_all_metadata=true` (the event_type alone otherwise)."""
    tag = {"event_type": "soulflow_reply", "event_payload": {"id": "out_1"}}
    parent = await client.chat_postMessage(channel=GENERAL, text="top", metadata=tag)
    assert parent["message"]["metadata"] == tag
    await client.chat_postMessage(channel=GENERAL, text="in thread", thread_ts=parent["ts"],
                                  metadata={"event_type": "soulflow_reply",
                                            "event_payload": {"id": "out_2"}})
    full = await client.conversations_history(channel=GENERAL, include_all_metadata=True)
    assert full["messages"][0]["metadata"] == tag
    bare = await client.conversations_history(channel=GENERAL)
    assert bare["messages"][0]["metadata"] == {"event_type": "soulflow_reply"}
    thread = await client.conversations_replies(channel=GENERAL, ts=parent["ts"],
                                                include_all_metadata=True)
    assert [m["metadata"]["event_payload"]["id"] for m in thread["messages"]] == ["out_1",
                                                                                  "out_2"]
    assert len(fake.messages) == 2


async def test_update_and_delete(client: AsyncWebClient, fake: FakeSlack) -> None:
    posted = await client.chat_postMessage(channel=GENERAL, text="thinking…")
    updated = await client.chat_update(channel=GENERAL, ts=posted["ts"], text="done")
    assert updated["text"] == "done" and fake.bot_texts() == ["done"]
    assert fake.messages[0].message["edited"]["user"] == BOT_USER_ID
    human = fake.post_user_message(GENERAL, "mine", HUMAN)
    with pytest.raises(SlackApiError, match="cant_update_message"):
        await client.chat_update(channel=GENERAL, ts=human["ts"], text="hijack")
    await client.chat_delete(channel=GENERAL, ts=posted["ts"])
    assert fake.bot_texts() == [] and fake.messages[0].deleted


async def test_history_pagination(client: AsyncWebClient, fake: FakeSlack) -> None:
    sent = [fake.post_user_message(GENERAL, f"m{i}", HUMAN) for i in range(5)]
    first = await client.conversations_history(channel=GENERAL, limit=2)
    assert [m["text"] for m in first["messages"]] == ["m4", "m3"]
    assert first["has_more"] and first["response_metadata"]["next_cursor"]
    pages = [page["messages"] async for page in first]  # slack_sdk follows next_cursor
    texts = [m["text"] for page in pages for m in page]
    assert texts == ["m4", "m3", "m2", "m1", "m0"] and len(pages) == 3
    window = await client.conversations_history(
        channel=GENERAL, oldest=sent[1]["ts"], latest=sent[3]["ts"], inclusive=True
    )
    assert [m["text"] for m in window["messages"]] == ["m3", "m2", "m1"]
    with pytest.raises(SlackApiError, match="invalid_cursor"):
        await client.conversations_history(channel=GENERAL, cursor="garbage!")


async def test_reactions(client: AsyncWebClient, fake: FakeSlack) -> None:
    message = fake.post_user_message(GENERAL, "react to me", HUMAN)
    await client.reactions_add(channel=GENERAL, timestamp=message["ts"], name="eyes")
    got = await client.reactions_get(channel=GENERAL, timestamp=message["ts"])
    assert got["message"]["reactions"] == [{"name": "eyes", "users": [BOT_USER_ID], "count": 1}]
    with pytest.raises(SlackApiError, match="already_reacted"):
        await client.reactions_add(channel=GENERAL, timestamp=message["ts"], name="eyes")
    with pytest.raises(SlackApiError, match="invalid_name"):
        await client.reactions_add(channel=GENERAL, timestamp=message["ts"], name=":eyes:")
    with pytest.raises(SlackApiError, match="message_not_found"):
        await client.reactions_add(channel=GENERAL, timestamp="1.000001", name="eyes")


async def test_users_and_conversations_info(client: AsyncWebClient, fake: FakeSlack) -> None:
    fake.add_user("U0ALICE001", "alice", real_name="Alice Liddell")
    user = (await client.users_info(user="U0ALICE001"))["user"]
    assert user["profile"]["real_name"] == "Alice Liddell" and not user["is_bot"]
    with pytest.raises(SlackApiError, match="user_not_found"):
        await client.users_info(user="U0NOBODY00")
    channel = (await client.conversations_info(channel=GENERAL))["channel"]
    assert channel["name"] == "general" and channel["is_member"]
    dm = await client.conversations_open(users="U0ALICE001")
    assert (await client.conversations_info(channel=dm["channel"]["id"]))["channel"]["is_im"]


async def test_files_upload_v2_round_trip(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = fake.post_user_message(GENERAL, "send me the report", HUMAN)
    result = await client.files_upload_v2(
        channel=GENERAL, content="hello world", filename="report.txt", title="Report",
        initial_comment="here you go", thread_ts=parent["ts"],
    )  # fmt: skip
    assert result["file"]["name"] == "report.txt" and result["file"]["title"] == "Report"
    methods = [r.method for r in fake.requests if r.method != "auth.test"]
    assert methods == ["files.getUploadURLExternal", "upload", "files.completeUploadExternal"]
    (upload,) = fake.uploads
    assert (upload.data, upload.channel, upload.thread_ts) == (
        b"hello world",
        GENERAL,
        parent["ts"],
    )
    assert upload.initial_comment == "here you go"
    share = fake.messages[-1].message
    assert share["thread_ts"] == parent["ts"] and share["files"][0]["id"] == upload.file_id
    url = result["file"]["url_private"]
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as resp:
            assert await resp.read() == b"hello world"
        async with session.get(url) as resp:  # no token: Slack's HTML login page, not bytes
            assert resp.content_type == "text/html"


async def test_user_file_share_is_downloadable(client: AsyncWebClient, fake: FakeSlack) -> None:
    message = fake.post_user_message(GENERAL, "log attached", HUMAN, files=[("log.txt", b"boom")])
    assert message["subtype"] == "file_share"
    info = await client.files_info(file=message["files"][0]["id"])
    assert info["file"]["size"] == 4 and info["file"]["mimetype"] == "text/plain"
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    async with httpx.AsyncClient() as http:
        response = await http.get(info["file"]["url_private_download"], headers=headers)
    assert response.content == b"boom"


async def test_rate_limit_surfaces_retry_after(client: AsyncWebClient, fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", retry_after=3)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=GENERAL, text="too fast")
    response = caught.value.response
    assert response.status_code == 429 and response["error"] == "ratelimited"
    assert response.headers["Retry-After"] == "3"
    assert (await client.chat_postMessage(channel=GENERAL, text="ok"))["ok"]


async def test_sdk_retry_handler_honours_retry_after(fake: FakeSlack) -> None:
    handler = AsyncRateLimitErrorRetryHandler(max_retry_count=1)
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url, retry_handlers=[handler])
    fake.fail_next("chat.postMessage", retry_after=0)
    assert (await client.chat_postMessage(channel=GENERAL, text="retried"))["ok"]
    assert len(fake.calls("chat.postMessage")) == 2 and fake.bot_texts() == ["retried"]


async def test_fail_next_error_codes_and_delay(client: AsyncWebClient, fake: FakeSlack) -> None:
    fake.fail_next("reactions.add", "channel_not_found", count=2)
    message = fake.post_user_message(GENERAL, "x", HUMAN)
    for _ in range(2):
        with pytest.raises(SlackApiError, match="channel_not_found"):
            await client.reactions_add(channel=GENERAL, timestamp=message["ts"], name="eyes")
    fake.delay_next("auth.test", 0.3)
    started = time.monotonic()
    await client.auth_test()
    assert time.monotonic() - started >= 0.3


# -- Socket Mode -----------------------------------------------------------------------------
async def test_socket_mode_delivers_and_records_acks(
    fake: FakeSlack, socket_client: SocketModeClient
) -> None:
    received: list[SocketModeRequest] = []
    raw: list[dict[str, Any]] = []

    async def record_raw(client: Any, message: dict[str, Any], raw_text: str | None) -> None:
        raw.append(message)

    socket_client.message_listeners.append(record_raw)
    socket_client.socket_mode_request_listeners.append(acking_listener(received))
    await socket_client.connect()
    await fake.wait_for(lambda: fake.connection_count == 1)
    fake.post_user_message(GENERAL, f"<@{BOT_USER_ID}> summarize", HUMAN)
    await fake.wait_for(lambda: len(fake.acks) == 2)
    kinds = [r.payload["event"]["type"] for r in received]
    assert kinds == ["message", "app_mention"]
    assert all(r.type == "events_api" for r in received)
    event = received[0].payload["event"]
    assert event["channel"] == GENERAL and event["user"] == HUMAN
    assert event["channel_type"] == "channel"
    assert {a.envelope_id for a in fake.acks} == {r.envelope_id for r in received}
    assert raw[0]["type"] == "hello" and raw[0]["connection_info"]["app_id"]


async def test_socket_mode_reconnects_after_disconnect_message(
    fake: FakeSlack, socket_client: SocketModeClient
) -> None:
    received: list[SocketModeRequest] = []
    socket_client.socket_mode_request_listeners.append(acking_listener(received))
    await socket_client.connect()
    await fake.wait_for(lambda: fake.connection_count == 1)
    assert fake.send_disconnect() == 1
    await fake.wait_for(lambda: fake.socket.hellos == 2 and fake.connection_count == 1)
    assert len(fake.calls("apps.connections.open")) == 2
    fake.add_reaction_event(GENERAL, fake.post_user_message(GENERAL, "x", HUMAN)["ts"], HUMAN)
    await fake.wait_for(lambda: len(fake.acks) == 2)
    assert received[-1].payload["event"]["type"] == "reaction_added"


@pytest.mark.parametrize("how", ["close", "drop"])
async def test_socket_mode_reconnects_after_server_side_loss(
    fake: FakeSlack, socket_client: SocketModeClient, how: str
) -> None:
    received: list[SocketModeRequest] = []
    socket_client.socket_mode_request_listeners.append(acking_listener(received))
    await socket_client.connect()
    await fake.wait_for(lambda: fake.connection_count == 1)
    if how == "close":
        assert await fake.close_sockets() == 1
    else:
        assert fake.drop_sockets() == 1
    await fake.wait_for(lambda: fake.socket.hellos == 2 and fake.connection_count == 1, 5)
    fake.post_user_message(GENERAL, "after reconnect", HUMAN)
    await fake.wait_for(lambda: len(fake.acks) == 1)
    assert received[0].payload["event"]["text"] == "after reconnect"


async def test_events_queue_until_a_client_connects(
    fake: FakeSlack, socket_client: SocketModeClient
) -> None:
    fake.post_user_message(GENERAL, "sent while offline", HUMAN)
    assert len(fake.socket.pending) == 1
    received: list[SocketModeRequest] = []
    socket_client.socket_mode_request_listeners.append(acking_listener(received))
    await socket_client.connect()
    await fake.wait_for(lambda: len(fake.acks) == 1)
    assert received[0].payload["event"]["text"] == "sent while offline"


async def test_unacked_envelopes_are_redelivered() -> None:
    fake = FakeSlack(redeliver_after=0.2, echo_bot_events=False)
    await fake.start()
    sm = SocketModeClient(app_token=APP_TOKEN, web_client=AsyncWebClient(base_url=fake.base_url))
    seen: list[SocketModeRequest] = []

    async def ack_only_retries(client: Any, request: SocketModeRequest) -> None:
        seen.append(request)
        if request.retry_attempt:
            await client.send_socket_mode_response({"envelope_id": request.envelope_id})

    sm.socket_mode_request_listeners.append(ack_only_retries)
    try:
        await sm.connect()
        fake.post_user_message(GENERAL, "ack me late", HUMAN)
        await fake.wait_for(lambda: len(fake.acks) == 1, timeout=30)
        assert [(r.retry_attempt, r.retry_reason) for r in seen] == [(0, ""), (1, "timeout")]
        assert seen[0].envelope_id == seen[1].envelope_id
    finally:
        await sm.close()
        await fake.stop()


async def test_bolt_app_end_to_end(fake: FakeSlack) -> None:
    """slack_bolt over Socket Mode: mention in, threaded reply out, own echo ignored."""
    app = AsyncApp(client=AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url))

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        await say(text=f"on it: {event['text']}", thread_ts=event["ts"])

    @app.event("message")
    async def on_message() -> None:
        return None

    handler = AsyncSocketModeHandler(app, APP_TOKEN)
    await handler.connect_async()
    try:
        mention = fake.post_user_message(GENERAL, f"<@{BOT_USER_ID}> hello", HUMAN)
        await fake.wait_for(lambda: len(fake.messages) == 1)
        assert fake.messages[0].thread_ts == mention["ts"]
        assert fake.messages[0].text == f"on it: <@{BOT_USER_ID}> hello"
        await fake.wait_for(lambda: len(fake.acks) == len(fake.envelopes) == 3)  # + own echo
    finally:
        await handler.close_async()


# -- runners -------------------------------------------------------------------------------
def test_thread_runner() -> None:
    with FakeSlackThread() as slack:
        slack.post_user_message(GENERAL, "from the test thread", HUMAN)
        with httpx.Client() as http:
            headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
            history = http.get(
                f"{slack.base_url}conversations.history", params={"channel": GENERAL},
                headers=headers,
            ).json()  # fmt: skip
            assert history["messages"][0]["text"] == "from the test thread"
            http.post(f"{slack.base_url}chat.postMessage", headers=headers,
                      json={"channel": GENERAL, "text": "pong"})  # fmt: skip
        slack.wait_for(lambda: bool(slack.fake.messages), timeout=30)
        assert slack.bot_texts() == ["pong"] and slack.messages[0].text == "pong"


def test_cli_prints_ready_url() -> None:
    with fake_process("tests.fakes.slack_api") as url:
        headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
        body = httpx.post(f"{url}/api/auth.test", headers=headers, timeout=5).json()
        assert body["ok"] and body["user_id"] == BOT_USER_ID


async def test_stop_closes_the_sockets_of_connected_clients(fake: FakeSlack) -> None:
    """stop() does not wait for a connected client to hang up: it closes the client's socket
    with a close frame (1001, "server closing"), not by dropping it at a shutdown timeout."""
    sm = SocketModeClient(app_token=APP_TOKEN, web_client=AsyncWebClient(base_url=fake.base_url))
    await sm.connect()
    await fake.wait_for(lambda: fake.connection_count == 1)
    session = sm.current_session
    assert session is not None
    sm.auto_reconnect_enabled = False
    await fake.stop()
    await until(lambda: session.closed, timeout=20)
    assert session.close_code == WSCloseCode.GOING_AWAY
    await sm.close()
