"""The vault, `/stop`'s scan and the plans under review on a started Redis backend wait for
Redis without holding the event loop: sealing a message that carries a credential, `/secret
set`, the `/secret` command, a reference opened for a turn, a plan offered, read and taken off
review, a chat's unfinished tasks. The proxy runs on the test's loop, so a call that held the
loop would also hold the proxy, and the ticker would see the whole round trip as one gap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.channels.base import Command
from soulflow.contracts import Attachment, InboundMessage
from soulflow.conversation.attachments import fetchable_off_loop
from soulflow.conversation.secret_command import make_secret_command
from soulflow.errors import StoreError
from soulflow.security.inbound import InboundSealer, SealReport, needs_vault
from soulflow.security.references import inspect_secret_references_for_orchestration
from soulflow.security.vault import SecretVault
from soulflow.tasks import TaskStatus
from soulflow.tasks.review import Proposal
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer
from tests.security.samples import AWS_KEY, OPENAI_KEY
from tests.tasks.helpers import waiting_task
from tests.waiting import loop_gaps, until

DELAY_S = 0.2  # each way: one round trip held on the loop would show as a 0.4 s gap


@pytest.fixture
async def slow(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[
        tuple[RedisBackend, CuttableProxy]]:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    backend = RedisBackend(AsyncStoreRedis.from_url(proxy.url), node_id="node-a",
                           prefix=f"lv{tmp_path.name}:", partitions=4, url=proxy.url)
    await backend.start()
    await until(lambda: backend.writer.running)
    try:
        yield backend, proxy
    finally:
        proxy.delay_s = 0.0
        proxy.restore()
        await backend.stop()
        await proxy.close()


async def _vault(backend: RedisBackend, tmp_path: Path) -> SecretVault:
    """As the daemon opens it: entries in Redis, calls through the backend's store thread.
    (Opened in that thread here: the proxy runs on this loop, which must not wait for it.)"""
    return await backend.offload(lambda: SecretVault(
        tmp_path / "security", entries=backend.secrets, offload=backend.offload))


def _message(text: str, message_id: str = "m1", **extra: object) -> InboundMessage:
    return InboundMessage(provider="telegram", chat_id="c1", message_id=message_id,
                          sender_id="u1", text=text, is_direct=True, **extra)  # type: ignore[arg-type]


def _vault_commands(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("hgetall", "evalsha", "eval", "hget", "hset"))


def test_only_a_message_with_something_to_seal_needs_the_vault() -> None:
    assert not needs_vault(_message("an ordinary message, 12 words or so, nothing secret"))
    assert not needs_vault(_message("/secret set bad/name value"))
    assert needs_vault(_message(f"here: {OPENAI_KEY}"))
    assert needs_vault(_message("/secret set GH_TOKEN abc"))
    assert needs_vault(_message("hi", thread_context=("earlier", f"key {AWS_KEY}")))
    assert needs_vault(_message("see file", attachments=[Attachment(
        name=f"{OPENAI_KEY}.txt", url="https://files.example/1")]))
    assert not needs_vault(_message("see file", attachments=[Attachment(
        name="notes.txt", url="https://files.example/1")]))


async def test_sealing_and_the_secret_command_wait_for_redis_off_the_loop(
        slow: tuple[RedisBackend, CuttableProxy], redis_server: RedisServer,
        tmp_path: Path) -> None:
    backend, proxy = slow
    vault = await _vault(backend, tmp_path)
    sealer = InboundSealer(vault, lambda provider, user: False)
    handle = make_secret_command(vault)
    ordinary = _message("an ordinary message", "m0")
    carrying = _message(f"use this key: {OPENAI_KEY}", "m1")
    setting = _message("/secret set DEPLOY_KEY s3cr3t-value-9876", "m2")
    before = _vault_commands(redis_server.url)
    proxy.delay_s = DELAY_S
    async with loop_gaps() as gaps:
        assert (await sealer.seal_off_loop(ordinary)).sealed == 0
        assert _vault_commands(redis_server.url) == before  # not one store call
        assert (await sealer.seal_off_loop(carrying)).sealed == 1
        report = await sealer.seal_off_loop(setting)
        assert report.stored_name == "DEPLOY_KEY"
        assert setting.text == "/secret set DEPLOY_KEY {{secret:DEPLOY_KEY}}"
        listed = await handle(Command("secret", "list"), setting)
        checked = await handle(Command("secret", setting.text.removeprefix("/secret ")),
                               setting)
        opened = await vault.offload(inspect_secret_references_for_orchestration,
                                     carrying.text, vault, chat="telegram:c1")
        removed = await handle(Command("secret", "rm DEPLOY_KEY"), setting)
    assert max(gaps) < 1.5 * DELAY_S, f"the loop was held {max(gaps):.2f} s"
    assert OPENAI_KEY not in carrying.text and "{{secret:inbound.telegram." in carrying.text
    assert listed.startswith("Stored secrets of this chat: DEPLOY_KEY.")
    assert checked.startswith("Stored secret DEPLOY_KEY.")
    assert opened.ok and opened.referenced
    assert removed == "Removed secret DEPLOY_KEY."
    assert not await vault.offload(vault.has, "DEPLOY_KEY")


async def test_a_sealed_attachment_url_is_opened_off_the_loop(
        slow: tuple[RedisBackend, CuttableProxy], tmp_path: Path) -> None:
    backend, proxy = slow
    vault = await _vault(backend, tmp_path)
    real = f"https://files.example/{OPENAI_KEY}/report.pdf"
    message = _message("report", attachments=[Attachment(name="report.pdf",
                                                         url=real)])
    await InboundSealer(vault).seal_off_loop(message)
    [sealed] = message.attachments
    assert sealed.url != real
    proxy.delay_s = DELAY_S
    async with loop_gaps() as gaps:
        opened = await fetchable_off_loop(sealed, message, vault)
    assert max(gaps) < 1.5 * DELAY_S, f"the loop was held {max(gaps):.2f} s"
    assert opened.url == real and sealed.url != real  # the message keeps the sealed one


async def test_a_vault_redis_cannot_reach_fails_the_sealing_not_the_loop(
        slow: tuple[RedisBackend, CuttableProxy], tmp_path: Path) -> None:
    """The message is then quarantined by the intake, never stored in clear; the loop runs
    on meanwhile (the client's timeout is spent in the store thread)."""
    backend, proxy = slow
    sealer = InboundSealer(await _vault(backend, tmp_path))
    carrying = _message(f"use this key: {OPENAI_KEY}")
    proxy.blackhole()
    async with loop_gaps() as gaps:
        with pytest.raises(StoreError):
            await sealer.seal_off_loop(carrying)
    assert max(gaps) < 0.5, f"the loop was held {max(gaps):.2f} s"


async def test_plans_and_the_chats_unfinished_tasks_are_read_off_the_loop(
        slow: tuple[RedisBackend, CuttableProxy]) -> None:
    backend, proxy = slow
    chat = "local:slow@node-a"
    await backend.tasks.add(waiting_task("t-wait", "slow@node-a"))
    await backend.tasks.add(waiting_task("t-else", "other@node-a"))
    proposals = backend.proposals
    plan = Proposal(chat={"provider": "local", "chat_id": "slow@node-a", "thread_id": None},
                    requested_by="local", request="mail them", title="Mail", graph={
                        "nodes": []}, risks=["ok is an approval gate"])
    proxy.delay_s = DELAY_S
    async with loop_gaps() as gaps:
        await proposals.put(chat, plan)
        assert await proposals.get(chat) == plan  # kept here under the chat's lease
        unfinished = await backend.tasks.fetch_unfinished(chats=chat.__eq__)
        assert await proposals.pop(chat) == plan
        assert await proposals.get(chat) is None
        assert await proposals.pop(chat) is None
    assert max(gaps) < 1.5 * DELAY_S, f"the loop was held {max(gaps):.2f} s"
    assert [(t.task_id, t.status) for t in unfinished] == [
        ("t-wait", TaskStatus.WAITING_APPROVAL)]


async def test_a_plan_written_twice_at_once_is_read_again_not_guessed(
        slow: tuple[RedisBackend, CuttableProxy], redis_server: RedisServer) -> None:
    """Two writes of one chat's plan in flight together (an answer and /stop) may reach Redis
    in either order: neither is kept as known, the next `get` reads which won."""
    backend, _ = slow
    chat = "local:slow@node-a"
    plan = Proposal(chat={}, requested_by="local", request="r", title="T", graph={"nodes": []})
    proposals = backend.proposals
    await asyncio.gather(proposals.put(chat, plan), proposals.pop(chat))
    stored = redis.Redis.from_url(redis_server.url).hget(f"{backend.keys.prefix}tasks:proposals",
                                                         chat)
    assert (await proposals.get(chat) is None) == (stored is None)


async def test_a_flood_of_messages_carrying_keys_is_sealed_off_the_loop(
        slow: tuple[RedisBackend, CuttableProxy], tmp_path: Path) -> None:
    """300 messages at once, each with its own key, among 300 ordinary ones: every key is
    sealed (one entry each, scoped to its chat), none left in clear, and the ordinary ones
    do not queue behind them in the store thread (each is done before any sealed one)."""
    backend, _ = slow
    vault = await _vault(backend, tmp_path)
    sealer = InboundSealer(vault)
    keys = [f"sk-proj-Flood{i:04d}NotReal0123456789abcdefghijKLMN" for i in range(300)]
    carrying = [_message(f"key {i}: {key}", f"k{i}") for i, key in enumerate(keys)]
    ordinary = [_message(f"hello {i}", f"o{i}") for i in range(300)]
    done: list[str] = []

    async def seal(message: InboundMessage) -> SealReport:
        report = await sealer.seal_off_loop(message)
        done.append(message.message_id[0])
        return report

    async with loop_gaps() as gaps:
        reports = await asyncio.gather(*(seal(m) for m in carrying),
                                       *(seal(m) for m in ordinary))
    assert done == ["o"] * 300 + ["k"] * 300
    assert [r.sealed for r in reports] == [1] * 300 + [0] * 300
    assert all(key not in m.text for key, m in zip(keys, carrying, strict=True))
    assert [m.text for m in ordinary] == [f"hello {i}" for i in range(300)]
    names = await vault.offload(vault.names, chat="telegram:c1")
    assert len([n for n in names if ".openai_key." in n]) == 300
    assert max(gaps) < 0.5, f"the loop was held {max(gaps):.2f} s"
