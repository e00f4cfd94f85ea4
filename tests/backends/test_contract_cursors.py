"""A channel's read position kept in the backend's CursorStore (what `ChannelState.share` does on
a shared account), the same assertions over the file and the Redis backend: it is loaded when a
node becomes the account's reader, written under the reader's lease, and a deposed reader's
late write is refused and ends its term."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from soulflow.backends.base import Backend, Lease
from soulflow.channels.leadership import AccountLeadership
from soulflow.channels.state import ChannelState
from tests.backends.conftest import Harness
from tests.waiting import until

ACCOUNT = "account:telegram"


@dataclass
class FrozenElection:
    """An election that keeps believing in one lease (as a node does until its next renewal
    fails): what a leader looks like in the instant after another node took the account."""

    held: Lease
    name: str = ACCOUNT
    owner: str = "node-a"
    #: how often the lease was looked at (a waiter checking it again is a positive signal)
    looks: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def lease(self) -> Lease:
        self.looks += 1
        return self.held

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def announce_change(self) -> None:
        """Wake every waiter as a renewal would, with the same lease still held."""
        self._changed.set()
        self._changed = asyncio.Event()

    def start(self) -> None:
        """Nothing to campaign for."""

    async def stop(self) -> None:
        """Nothing to release."""


def believed(lease: Lease) -> Lease:
    """The lease with a local deadline far ahead (the node does not yet doubt it)."""
    return Lease(lease.name, lease.owner, lease.token, time.monotonic() + 60)


async def shared_state(backend: Backend, tmp_path: Path, lease: Lease
                       ) -> tuple[ChannelState, AccountLeadership]:
    leadership = AccountLeadership(FrozenElection(believed(lease), owner=lease.owner))
    state = ChannelState(tmp_path / f"unused-{lease.owner}.json")
    state.share(backend.cursors, "telegram", leadership)
    await state.load()
    return state, leadership


async def new_reader(backend: Backend, tmp_path: Path, node: str
                     ) -> tuple[ChannelState, AccountLeadership, Lease]:
    """`node` takes the account's lease (it must be free) and loads the shared state as its
    reader: the state, its leadership and the lease it holds."""
    lease = await backend.leases.acquire(ACCOUNT, node, 6.0)
    assert lease is not None
    state, leadership = await shared_state(backend, tmp_path, lease)
    return state, leadership, lease


async def test_the_reader_s_position_is_stored_and_loaded_by_the_next_reader(
        harness: Harness, tmp_path: Path) -> None:
    backend = await harness.open()
    state, _, lease = await new_reader(backend, tmp_path, "node-a")
    assert state.get("offset") is None
    for offset in range(1, 50):  # one commit per batch: merged while a write is out
        state.set("offset", offset)
    state.update({"primed": True, "thread_cursors": {"17": "17.5"}})
    assert await state.drain()
    await state.close()
    assert await backend.cursors.load("telegram") == {
        "offset": 49, "primed": True, "thread_cursors": {"17": "17.5"}}

    await backend.leases.release(lease)  # a clean stop hands the account over
    reopened = await harness.reopen(backend)  # a restart; the next reader loads it
    later, _, lease = await new_reader(reopened, tmp_path, "node-b")
    assert later.snapshot() == {"offset": 49, "primed": True, "thread_cursors": {"17": "17.5"}}
    await later.close()


async def test_a_deposed_reader_cannot_move_the_cursor_and_its_term_ends(
        harness: Harness, tmp_path: Path) -> None:
    backend = await harness.open()
    deposed, leadership, old = await new_reader(backend, tmp_path, "node-a")
    deposed.set("offset", 10)
    assert await deposed.drain()

    assert await backend.leases.release(old)  # gone (expired, say); another node takes it
    current, _, new = await new_reader(backend, tmp_path, "node-b")
    assert new.token > old.token
    assert current.get("offset") == 10

    deposed.set("offset", 99)  # node-a still believes it leads
    assert not await deposed.drain()
    assert "refused" in await asyncio.wait_for(leadership.lost(old), 5.0)
    assert leadership.lease is None  # fenced: no further writes are even tried
    deposed.set("offset", 100)
    assert not await deposed.drain()

    current.set("offset", 11)
    assert await current.drain()
    assert (await backend.cursors.load("telegram"))["offset"] == 11
    await deposed.close()
    await current.close()


async def test_a_fenced_term_does_not_restart_until_a_new_lease(
        harness: Harness, tmp_path: Path) -> None:
    """The reader waits for `acquired()` after a fence: the same (refused) lease must not start
    a new term, or the reader would spin reading and being fenced again."""
    backend = await harness.open()
    deposed, leadership, old = await new_reader(backend, tmp_path, "node-a")
    await backend.leases.release(old)
    assert await backend.leases.acquire(ACCOUNT, "node-b", 6.0) is not None
    deposed.set("offset", 5)
    assert not await deposed.drain()
    election = leadership.election
    assert isinstance(election, FrozenElection)
    waiting = asyncio.ensure_future(leadership.acquired())
    for _ in range(3):  # each time the waiter has looked at the lease again: still waiting
        looked = election.looks
        election.announce_change()
        await until(lambda looked=looked: election.looks > looked)
        assert not waiting.done()  # still the fenced token: no new term
    waiting.cancel()
    await deposed.close()


async def test_a_node_that_ran_on_files_seeds_an_empty_shared_store(
        harness: Harness, tmp_path: Path) -> None:
    """Switching to a shared backend must not prime the account again: the cursor file of the
    node's file-backend days is where the shared position starts (once, while it is empty)."""
    backend = await harness.open()
    lease = await backend.leases.acquire(ACCOUNT, "node-a", 6.0)
    assert lease is not None
    old_file = tmp_path / "files-days" / "telegram.json"
    days_on_files = ChannelState(old_file)
    days_on_files.set("offset", 4242)
    assert days_on_files.flush()

    state = ChannelState(old_file)
    state.share(backend.cursors, "telegram", AccountLeadership(FrozenElection(believed(lease))))
    await state.load()
    assert state.get("offset") == 4242
    assert await state.drain()
    assert (await backend.cursors.load("telegram"))["offset"] == 4242
    await state.close()

    other = ChannelState(tmp_path / "elsewhere.json")  # a node whose file says otherwise
    other.set("offset", 7)
    assert other.flush()
    other = ChannelState(tmp_path / "elsewhere.json")
    other.share(backend.cursors, "telegram", AccountLeadership(FrozenElection(believed(lease))))
    await other.load()
    assert other.get("offset") == 4242  # the store is not empty: it wins
    await other.close()
