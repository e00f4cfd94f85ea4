"""The Redis backend: the stores over one Redis, and the partition leases they share.

The bus's stores use the asynchronous client; the stores the agent and the services call
synchronously (sessions, run journals, approval prompts, cron, tasks, decisions, the vault's
entries, the heartbeat's state) share one synchronous client (`sync_client.py`), made on the
first use of one of them and closed last by `stop()`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from soulflow.agent.run.timing import FinishedListener
from soulflow.backends.base import (
    SEEN_WINDOW_S,
    BackendKind,
    BackendUnavailable,
    Lease,
    LoopFactory,
    P,
    R,
)
from soulflow.backends.redis.approvals import RedisApprovalMap
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.cron import RedisCronStore
from soulflow.backends.redis.decisions import RedisDecisionStore
from soulflow.backends.redis.events import RedisWorkflowLog
from soulflow.backends.redis.fencing import partition_fence
from soulflow.backends.redis.inbound import RedisInbound
from soulflow.backends.redis.keys import Keys, TaskKeys, partition_of
from soulflow.backends.redis.lease import RedisLeases
from soulflow.backends.redis.outbox import RedisOutbox
from soulflow.backends.redis.partitions import PartitionLeases
from soulflow.backends.redis.proposals import RedisProposalMap
from soulflow.backends.redis.records import (
    RedisCursors,
    RedisDeadLetters,
    RedisInboundDeadLetters,
)
from soulflow.backends.redis.runs import RedisRunJournal
from soulflow.backends.redis.services import RedisHeartbeatState, RedisNoticeClaims
from soulflow.backends.redis.sessions import RedisSessionStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.backends.redis.tasks import PartitionFence, RedisTaskStore
from soulflow.backends.redis.usage import RedisUsageStore
from soulflow.backends.redis.vault import RedisSecretEntries
from soulflow.backends.redis.writeback import WRITE_DELAY_S, WriteBehind
from soulflow.errors import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

MAX_CALL_S = 2.0  # the longest one synchronous Redis call may block the event loop


def shown_url(url: str) -> str:
    """The URL with any password replaced, fit for an error message or a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def client_for(url: str, *, timeout_s: float = 5.0,
               socket_timeout_s: float = 3.0) -> AsyncStoreRedis:
    """A client for `url` (no connection yet), or BackendUnavailable naming a malformed URL.

    A command that fails on a connection error is tried again twice on a new connection: after
    a Redis restart every pooled connection is dead, and without this the first command on
    each (a turn's completion, say) would fail although Redis is back. A timeout is not tried
    again: the socket timeout bounds what a cut-off Redis costs a caller (a lease renewal
    must fail before the lease's deadline, not three timeouts later). A retried command may
    have run once already (Redis died after running it, before answering); every write here
    is idempotent or says so (`accept` of a stored message answers "seen", an entry read and
    never handed out is swept after a TTL). What still fails is raised as `StoreUnavailable`
    or `StoreError` (redis/errors.py)."""
    try:
        return AsyncStoreRedis.from_url(url, socket_connect_timeout=timeout_s,
                              socket_timeout=socket_timeout_s, health_check_interval=30,
                              retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2,
                                          supported_errors=(RedisConnectionError,)))
    except ValueError as exc:
        raise BackendUnavailable(f"REDIS_URL {shown_url(url)!r} is not a Redis URL ({exc}); "
                                 "use redis://host:6379/0, rediss:// for TLS, or "
                                 "unix:///path/to/redis.sock") from None


async def check_reachable(client: AsyncStoreRedis, url: str, *,
                          timeout_s: float = 5.0) -> None:
    """PING, or BackendUnavailable with one sentence for the operator (the client is closed)."""
    try:
        await asyncio.wait_for(client.ping(), timeout=timeout_s + 1)
    except StoreError as exc:
        await client.aclose()
        if isinstance(exc.__cause__, AuthenticationError):
            raise BackendUnavailable(f"Redis at {shown_url(url)} refused the credentials in "
                                     f"REDIS_URL ({exc})") from None
        raise BackendUnavailable(redis_failure(url, exc, "is unreachable")) from None
    except (OSError, TimeoutError) as exc:
        await client.aclose()
        raise BackendUnavailable(redis_failure(url, exc, "is unreachable")) from None


def redis_failure(url: str, exc: BaseException, what: str | None = None) -> str:
    """One sentence for the operator about a Redis call that failed, the password hidden:
    "is unreachable" when Redis did not answer, else "failed" (unless `what` says)."""
    reason = str(exc).split(". ")[0].rstrip(".") or type(exc).__name__
    if what is None:
        what = "is unreachable" if isinstance(exc, StoreUnavailable) else "failed"
    return f"Redis at {shown_url(url)} (REDIS_URL) {what}: {reason}"


@dataclass(slots=True)
class Reachability:
    """Whether Redis answered the last lease round, and since when it has not: the node's
    own view, shown on /api/state and the page. Logs one line per change, not per try."""

    connected: bool = True
    since: float | None = None  # wall time of the first failure of the current outage
    last_error: str = ""

    def ok(self) -> None:
        if not self.connected:
            log.warning("Redis reachable again (unreachable since %s)",
                        time.strftime("%H:%M:%S", time.localtime(self.since or 0)))
        self.connected, self.since = True, None

    def failed(self, exc: BaseException) -> None:
        self.last_error = (str(exc) or type(exc).__name__)[:300]
        if self.connected:
            log.error("Redis unreachable (%s): this node takes no new work until it is back",
                      self.last_error)
            self.connected, self.since = False, time.time()


class RedisBackend:
    """Stores on one Redis. `start()` checks Redis answers, creates the stream groups and takes
    this node's share of partitions before returning (so work can be claimed at once), then
    keeps the leases in the "backend:partitions" task, which also tells whether Redis answers
    and calls the `on_partitions_changed` callbacks when the held set changes."""

    kind = BackendKind.REDIS
    shared = True  # several daemons: this node owns the chats of the partitions it holds

    def __init__(self, client: AsyncStoreRedis, *, node_id: str, prefix: str = "soulflow:",
                 partitions: int = 16, lease_ttl_s: float = 6.0,
                 seen_ttl_s: float = SEEN_WINDOW_S,
                 redact: Callable[[str], str] | None = None,
                 redact_strings: Callable[[Any], Any] | None = None,
                 on_run_finished: FinishedListener | None = None,
                 clock: Callable[[], float] = time.time, url: str = "",
                 state: StateRedis | None = None,
                 write_delay_s: float = WRITE_DELAY_S) -> None:
        """`state`: the synchronous client of the stores the agent calls; by default made from
        `url` on first use (see `state`). `write_delay_s`: how long the writer gathers the
        writes nobody waits for (writeback.py)."""
        self.client = client
        self.node_id = node_id
        self.url = url
        self._redact = redact
        self._redact_strings = redact_strings
        self._on_run_finished = on_run_finished
        if state is not None:
            self.state = state
        self.keys = Keys(prefix, partitions)
        self.leases = RedisLeases(client, self.keys)
        self.partitions = PartitionLeases(client, self.keys, self.leases, node_id,
                                          ttl_s=lease_ttl_s, on_taken=self._held_changed)
        self.inbound = RedisInbound(client, self.keys, self.partitions, seen_ttl_s=seen_ttl_s,
                                    clock=clock)
        self.outbox = RedisOutbox(client, self.keys, self.partitions, answered_ttl_s=seen_ttl_s,
                                  inbound=self.inbound)
        # other work held per partition (e.g. running task graphs): not given away either
        self.busy_checks: list[Callable[[int], bool]] = []
        self.partitions.busy = lambda part: self.inbound.busy(part) or self.outbox.busy(
            part) or any(check(part) for check in self.busy_checks)
        self.partitions.reading = self.inbound.reading
        self.dlq = RedisDeadLetters(client, self.keys, clock=clock)
        self.inbound_dlq = RedisInboundDeadLetters(client, self.keys, redact=redact, clock=clock)
        self.cursors = RedisCursors(client, self.keys)
        self.reachability = Reachability()
        self._changed: list[Callable[[], None]] = []
        self._held: frozenset[int | str] = frozenset()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # the journal, sessions and usage queue their writes for this task (writeback.py)
        self.writer = WriteBehind(client, delay_s=write_delay_s)
        # the synchronous stores' calls the daemon's loops make (`offload`), in order
        self._store_thread = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="redis-stores")
        self._writer_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.url:
            await check_reachable(self.client, self.url)
        try:
            await self.inbound.ensure_groups()
            await self.partitions.rebalance()
        except StoreError as exc:
            if not isinstance(exc.__cause__, ResponseError):
                raise
            raise BackendUnavailable(f"Redis refused the backend's setup ({exc}); SoulFlow "
                                     "needs Redis 6.2 or newer with scripting allowed") from None
        self._held = frozenset(self.partitions.worked())
        self._stopping.clear()
        self._task = asyncio.create_task(self._keep_leases(), name="backend:partitions")
        self._writer_task = asyncio.create_task(self.writer.run(self._stopping),
                                                name="backend:writeback")

    async def _keep_leases(self) -> None:
        """Every quarter TTL: one lease round (beat, renew, take, give back); then tell the
        listeners if the set of partitions this node may act on changed (a lease that
        lapsed while Redis was away counts too)."""
        interval = self.partitions.ttl_s / 4
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=interval)
                return
            except TimeoutError:
                pass
            try:
                await asyncio.wait_for(self.partitions.rebalance(), timeout=interval * 2)
            except (StoreError, OSError, TimeoutError) as exc:
                self.reachability.failed(exc)
            except Exception:
                log.exception("partition leases: rebalance failed; retrying")
            else:
                self.reachability.ok()
            self._held_changed()

    def _held_changed(self) -> None:
        """Tell the listeners if the set of partitions this node may act on changed: after
        each round, and at once when a partition is taken (see PartitionLeases)."""
        held = frozenset(self.partitions.worked())
        if held == self._held:
            return
        log.info("partitions held by %s: %s", self.node_id, self.partitions.worked() or "none")
        self._held = held
        for callback in list(self._changed):
            try:
                callback()
            except Exception:
                log.exception("a partitions-changed listener failed")

    def hold_chats(self, running: Callable[[], Iterable[str]]) -> None:
        """The partitions of the chats in `running()` (work this node drives now: agent runs,
        task graphs) count as work in hand, which a rebalance never gives away: a node that
        joins must not take a chat over mid-step (it moves once that work finishes or waits,
        or when this node dies)."""
        parts = self.keys.partitions
        self.busy_checks.append(
            lambda part: any(partition_of(chat, parts) == part for chat in running()))

    def chat_lease(self, chat_key: str) -> Lease | None:
        """The lease of the chat's partition while this node may act on it, else None."""
        return self.partitions.lease(partition_of(chat_key, self.keys.partitions))

    def owns(self, chat_key: str) -> bool:
        return self.chat_lease(chat_key) is not None

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        self._changed.append(callback)

    def status(self) -> dict[str, Any]:
        reach = self.reachability
        return {"kind": str(self.kind), "node_id": self.node_id,
                "url": shown_url(self.url) if self.url else "",
                "connected": reach.connected, "since": reach.since,
                "last_error": reach.last_error,
                "partitions": {"held": self.partitions.held(), "total": self.keys.partitions},
                "private_partition": {"name": self.partitions.private, "held": (
                    self.partitions.lease(self.partitions.private) is not None)},
                "lease_ttl_s": self.partitions.ttl_s,
                "writes": self.writer.status()}

    def loops(self) -> dict[str, LoopFactory]:
        """None: Redis persists on its own (docs/scaling.md, persistence), and the leases are
        kept by the backend's own "backend:partitions" task."""
        return {}

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(redis_failure(self.url, exc))

    async def offload(self, call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """In the store thread: the synchronous client waits for Redis there, not on the
        event loop (a Redis far away or slow delays this call, nothing else)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._store_thread, functools.partial(call, *args, **kwargs))

    # -- the agent's and the services' stores (synchronous) -----------------------------

    @cached_property
    def state(self) -> StateRedis:
        """The synchronous client of this node's stores.

        A call that hangs on a dead Redis blocks the event loop, which must still notice in
        time that its leases lapsed (at two thirds of the TTL): a call waits at most a quarter
        of the TTL, and after a failure every call fails at once for half a TTL (the client's
        breaker), so a lost Redis blocks the loop for at most a third of the time, one call at
        a time."""
        ttl_s = self.partitions.ttl_s
        return StateRedis(sync_client(self.url, timeout_s=min(MAX_CALL_S, ttl_s / 4),
                                      cooldown_s=ttl_s / 2), self.keys.prefix)

    @cached_property
    def sessions(self) -> RedisSessionStore:
        return RedisSessionStore(self.state, redact=self._redact, writer=self.writer,
                                 fence=partition_fence(self))

    @cached_property
    def runs(self) -> RedisRunJournal:
        return RedisRunJournal(self.state, redact=self._redact_strings,
                               on_finished=self._on_run_finished, fence=partition_fence(self),
                               writer=self.writer)

    @cached_property
    def approvals(self) -> RedisApprovalMap:
        return RedisApprovalMap(self.state, "messages", writer=self.writer)

    @cached_property
    def task_prompts(self) -> RedisApprovalMap:
        return RedisApprovalMap(self.state, "task-prompts", writer=self.writer)

    @cached_property
    def cron(self) -> RedisCronStore:
        """An occurrence a node claimed and did not finish (it died) waits one lease TTL."""
        return RedisCronStore(self.state, claim_ttl_s=self.partitions.ttl_s,
                              client=self.client)

    @cached_property
    def tasks(self) -> RedisTaskStore:
        return RedisTaskStore(self.state, TaskKeys(self.keys.prefix),
                              fence=PartitionFence(self), offload=self.offload)

    @cached_property
    def proposals(self) -> RedisProposalMap:
        return RedisProposalMap(TaskKeys(self.keys.prefix), client=self.client,
                                fence=partition_fence(self))

    @cached_property
    def workflow(self) -> RedisWorkflowLog:
        return RedisWorkflowLog(self.state, TaskKeys(self.keys.prefix), offload=self.offload)

    @cached_property
    def decisions(self) -> RedisDecisionStore:
        return RedisDecisionStore(self.state, client=self.client)

    @cached_property
    def secrets(self) -> RedisSecretEntries:
        return RedisSecretEntries(self.state)

    @cached_property
    def heartbeat(self) -> RedisHeartbeatState:
        return RedisHeartbeatState(self.state)

    @cached_property
    def usage(self) -> RedisUsageStore:
        return RedisUsageStore(self.state, writer=self.writer)

    @cached_property
    def notice_claims(self) -> RedisNoticeClaims:
        return RedisNoticeClaims(self.state, self.node_id)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._writer_task is not None:  # its last batch, before the client closes
            await self._writer_task
            self._writer_task = None
        await self.partitions.stop()
        await self.client.aclose()
        if (workflow := self.__dict__.get("workflow")) is not None:
            await workflow.close()
        self._store_thread.shutdown(wait=False, cancel_futures=True)
        if (state := self.__dict__.get("state")) is not None:
            state.close()  # last: every synchronous store has stopped
