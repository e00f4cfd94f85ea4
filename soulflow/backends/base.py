"""The store port: every store protocol of the daemon, declared once, and the `Backend` that
builds them all (`file/`, the embedded default, or `redis/`, several daemons on one workload).

The bus's stores (inbound journal, outbox, both dead-letter queues, cursors, leases) are
asynchronous because a shared backend answers over the network; the stores the agent and the
services call many times per step (sessions, run journals, approval prompts, cron jobs, tasks
and their plans and workflow events, decisions, the vault's sealed entries, the heartbeat's
last tick) keep a synchronous API, with asynchronous edges where a shared store must not hold
the event loop: `settle` (queued writes are stored), `preload`/`find_inbound`/`refresh` (what
a turn or a round will read, read ahead) and `Backend.offload` (a loop's call, off the loop).
Two things the single-process file journals never needed come from sharing one workload
between nodes:

- `InboundStore.claim()`: the work this node may run now. Each accepted message is handed out
  once (to one node) until it is completed or its holder dies; a chat's messages come out in
  the order they were accepted.
- `LeaseStore`: named leases with fencing tokens, for "exactly one node reads this platform
  account" and "exactly one node works on this partition of chats"; `Backend.owns(chat)` is
  the one question the rest of the daemon asks about them.

A Redis store raises `soulflow.errors.StoreUnavailable` when Redis does not answer, never a
redis exception; a write that lost a race with another node raises a `StoreConflict`. The
records the stores keep are the domain's (`contracts`, and the models of layer 1.5 in
docs/development.md: run events and state, cron jobs, tasks, decisions, sealed secrets); this
module names them for annotations only. `tests/backends/` runs one contract suite against
both backends.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from soulflow.config import ConfigError
from soulflow.contracts import (
    DeadLetter,
    InboundDeadLetter,
    InboundMessage,
    IntakeStage,
    OutboundMessage,
    OutboxEntry,
)
from soulflow.errors import SoulFlowError

if TYPE_CHECKING:  # the models the stores keep (layer 1.5, below this module)
    from soulflow.agent.run.events import Event
    from soulflow.agent.run.reducer import RunState
    from soulflow.cron.jobs import Job
    from soulflow.decision.rules import Decision
    from soulflow.security.vault_records import StoredSecret
    from soulflow.tasks.model import TaskState, TaskStatus
    from soulflow.tasks.review import Proposal


#: How long an inbound message id is remembered after it was taken in (`InboundStore.accept`,
#: `mark_seen`), on both backends. The longest redelivery a platform makes is Telegram's: an
#: update stays in `getUpdates` until it is confirmed, for up to 24 hours. Slack's Socket Mode
#: and Events API retry within minutes, Discord replays a resumed gateway session's missed
#: events within its resume window (minutes), and the history reads behind Slack's and
#: Discord's cursors can only return what was taken in while the cursor was still being
#: stored, i.e. just before a crash (the file store keeps those a full window of running time
#: after the restart, however long the daemon was down: `storage/keyset.py`). Twice the
#: longest redelivery leaves a day for clock steps and for a platform retrying late. Not a
#: setting: shorter would let Telegram's redelivery through, and longer only costs space
#: (the file backend's SQLite, Redis's memory: ~100 bytes an id, 350 MB at 20 msg/s).
SEEN_WINDOW_S = 48 * 3600

#: The most entries each dead-letter queue lists (both backends). The entry that fills one
#: moves the whole queue aside under a dated name (a file `outbound-<UTC stamp>.jsonl` beside
#: it, or the Redis key `<key>:<stamp>-<hex>`), logged, kept whole, and the queue starts empty:
#: the queue's reads (`entries()`, `replay`, boot's count) stay bounded, and nothing is ever
#: dropped. Quarantined messages are small (content and raw excerpt capped, ~4 KB at most);
#: undelivered replies are kept whole for replay, and arrive by the thousand only when a
#: platform refuses everything for a long while.
INBOUND_DLQ_MAX = 10_000
OUTBOUND_DLQ_MAX = 100_000


P = ParamSpec("P")
R = TypeVar("R")


class Offload(Protocol):
    """`Backend.offload`, as the services that take it see it."""

    def __call__(self, call: Callable[P, R], /, *args: P.args,
                 **kwargs: P.kwargs) -> Awaitable[R]: ...


async def call_here(call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`Backend.offload` of a local store, and the default of a service built without one
    (tests): the call, on the event loop."""
    return call(*args, **kwargs)


class BackendKind(StrEnum):
    FILE = "file"
    REDIS = "redis"


class StoreConflict(SoulFlowError):
    """A write was refused because another node changed what it guards since this node read
    it: a run its chat's new holder took over (`RunMoved`), vault entries another node wrote
    (`EntriesChanged`). Not a `StoreError`: the store answered, and the caller must not treat
    it as the store being away (give the turn back, or report the backend unavailable)."""


class BackendUnavailable(ConfigError):
    """The configured backend cannot be reached at boot; the message is one sentence for the
    operator (a ConfigError, so `soulflow run` prints it and exits with a failure status)."""


class Completion(StrEnum):
    """How `InboundStore.complete()` ended."""

    DONE = "done"  # recorded: the message will not be handed out again
    UNKNOWN = "unknown"  # not pending (already completed, or never accepted)
    FENCED = "fenced"  # this node lost the lease it claimed the message under; the new holder
    #                    runs it again (see docs/scaling.md, "the duplicate window")


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease held by `owner`. `token` is the fencing token: it grows with every acquisition
    of the same name, so a write carrying an older token can be refused. `deadline` is this
    node's own (monotonic) view of when the lease stops being safe to act on; it falls before
    the lease can expire in the store, so a node cut off from the store stops first."""

    name: str
    owner: str
    token: int
    deadline: float

    @property
    def value(self) -> str:
        """What the store holds under the lease's key while it is held."""
        return f"{self.owner}|{self.token}"

    def valid(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.deadline


class LeaseStore(Protocol):
    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """Take the lease if nobody holds it; None if someone (anyone, even `owner` from an
        earlier life) still does."""

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Extend a lease we still hold (same owner and token); None if it was lost."""

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if we still hold it (a clean stop hands over at once)."""

    async def holder(self, name: str) -> tuple[str, int] | None:
        """(owner, token) of the current holder, or None."""


class InboundStore(Protocol):
    async def accept(self, message: InboundMessage) -> bool:
        """Journal a new message; False (and nothing written) if it was seen before."""

    async def is_seen(self, key: str) -> bool: ...

    async def mark_seen(self, keys: list[str]) -> None:
        """Record ids that must never be answered (history primed on a first read)."""

    async def complete(self, key: str, status: str, error: str | None = None) -> Completion:
        """Mark a message answered, refused/ignored, or failed; it is never handed out again."""

    async def claim(self, limit: int = 100, *, wait_s: float = 0.0) -> list[InboundMessage]:
        """Messages this node should run now, each handed out once; per chat in accept order.
        With `wait_s`, when there is nothing yet, wait up to that long for a message to arrive
        (keep it under the Redis socket timeout, half a lease TTL)."""

    async def release(self, messages: list[InboundMessage]) -> None:
        """Give claimed messages back, to be handed out again (first, in order): their turn
        failed in a way that could not be recorded (the store went away mid-turn). Local to
        this node: it never fails; a message of a partition lost meanwhile is left to the
        partition's new holder."""

    def first_delivery(self, key: str) -> bool:
        """The claimed message is handed out for the first time anywhere, so no turn can have
        answered it: its turn may skip `OutboxStore.has_answered`. False when unsure."""

    async def pending(self) -> list[InboundMessage]:
        """Every unfinished message (all nodes'), oldest first."""

    async def pending_count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Completing:
    """The completion of the inbound messages a turn answered (`InboundStore.complete`),
    written in the outbox's line behind the turn's replies (`OutboxStore.store`)."""

    keys: tuple[str, ...]
    status: str
    error: str | None = None


OutboxWrite = OutboundMessage | Completing
#: per write: stored or not (as `put`), or how each key's completion ended
WriteResult = bool | list[Completion]


class OutboxStore(Protocol):
    async def put(self, message: OutboundMessage) -> bool:
        """Store a message for delivery; False if an entry with its id is already pending."""

    async def store(self, writes: list[OutboxWrite]) -> list[WriteResult]:
        """Store replies (as `put`) and complete inbound messages (as `complete`), in this
        order and, where the store allows, in one step: one round trip on Redis, so a turn's
        reply and its completion, and the writes of every chat waiting meanwhile, cost one.
        A completion is never recorded ahead of a reply before it. Raises when the store did
        not answer: none of it may be taken as done, and the caller tries all of it again
        (a put that ran is then found stored; a completion that ran finds nothing pending)."""

    async def has_answered(self, inbound_key: str) -> bool:
        """True if a reply to this inbound message was already queued (perhaps sent)."""

    async def record_sending(self, message_id: str) -> bool:
        """Note that a send starts (if the node dies before reporting back, the platform may
        have the message). False: do not send it, here and now: the entry is gone, or its
        chat's partition is no longer this node's (a `pending()` list can go stale)."""

    async def record_attempt(self, message_id: str, attempts: int, next_at: float,
                             error: str) -> None: ...

    async def mark_sent(self, message_id: str, platform_ids: list[str] | None = None) -> None: ...

    async def mark_dead(self, message_id: str) -> None: ...

    async def get(self, message_id: str) -> OutboxEntry | None: ...

    async def pending(self) -> list[OutboxEntry]:
        """Entries this node is responsible for sending, per chat in insertion order."""

    async def count(self) -> int:
        """Pending entries in the whole store (every node's)."""


class DeadLetterStore(Protocol):
    async def add(self, message: OutboundMessage, *, retry_count: int,
                  error: str) -> DeadLetter: ...

    async def entries(self) -> list[DeadLetter]: ...

    async def recent(self, limit: int = 20) -> list[DeadLetter]:
        """The last `limit` letters, oldest first, without reading the whole queue."""

    async def remove(self, message_ids: Iterable[str]) -> int: ...

    async def purge(self) -> int: ...

    async def count(self) -> int: ...


class InboundDeadLetterStore(Protocol):
    async def add(self, *, provider: str, chat_id: str, message_id: str, sender_id: str,
                  stage: IntakeStage | str, error: str, content: str = "", raw: str = "",
                  key: str = "") -> InboundDeadLetter:
        """Record one message, redacted; raises if it cannot be stored."""

    async def entries(self) -> list[InboundDeadLetter]: ...

    async def recent(self, limit: int = 20) -> list[InboundDeadLetter]: ...

    async def purge(self) -> int: ...

    async def count(self) -> int: ...


class CursorStore(Protocol):
    async def load(self, channel: str) -> dict[str, Any]:
        """The channel's persisted cursors, offsets and flags."""

    async def update(self, channel: str, values: dict[str, Any], *,
                     lease: Lease | None = None) -> bool:
        """Set several values at once. With `lease`, only while that lease is still the
        current one (a deposed reader cannot move the cursor); False if refused."""


# -- the stores the agent and the services call (synchronous) -----------------------------

METADATA_TYPE = "metadata"  # `_type` of a session's first record (files and Redis alike)


@dataclass(slots=True)
class SessionInfo:
    key: str
    path: Path | None  # the session's file; None where sessions are not files (Redis)
    size_bytes: int
    updated_at: float


class SessionStore(Protocol):
    """Conversation history per session key, as the agent, the context builder, consolidation
    and the dashboard use it. Both backends return the same records for the same appends."""

    def append(self, key: str, message: dict[str, Any]) -> None:
        """Append one message (redacted before it is stored); `at` is added. Reads see it at
        once; on Redis it may still be on its way to the store (`settle`)."""

    async def settle(self, key: str | None = None) -> None:
        """Return once every message appended so far (to session `key`, or to any) is
        stored (on files: at once)."""

    async def preload(self, key: str, chat_key: str) -> None:
        """Before a turn of `chat_key` in session `key`: read what the turn will read of the
        session (its last records) without holding the event loop (on files: nothing)."""

    def last(self, key: str, count: int) -> list[dict[str, Any]]:
        """The last `count` messages, oldest first."""

    def range(self, key: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """Messages `start` (inclusive) to `end` (exclusive), from the first message."""

    def metadata(self, key: str) -> dict[str, Any] | None:
        """`{"_type": "metadata", "key", "created_at"}` of a session that has messages."""

    def list_sessions(self, limit: int | None = None) -> list[SessionInfo]:
        """Every session (or the `limit` latest), most recently updated first."""

    def sync(self) -> None: ...

    def close(self) -> None: ...


class RunMoved(StoreConflict):
    """A write to a run was refused: the run's chat is now another node's, which resumed it
    (see `RunJournal.claim`). The run goes on there; this node drops it without a reply, as
    with a fenced inbound completion (docs/scaling.md)."""


class RunJournal(Protocol):
    """Agent runs as journals of events (`agent/run/events.py`): what the agent loop and its
    callers use. A run is its events; `state()` is their fold (`agent/run/reducer.py`)."""

    def append(self, run_id: str, event: Event) -> RunState:
        """Record an event (redacted in storage), then fold it into the run's state. Raises
        `RunMoved` if another node has taken the run over. On Redis the write may still be
        on its way when this returns (`settle`)."""

    async def settle(self, run_id: str | None = None) -> None:
        """Return once every event appended so far is stored: where a crash must not lose
        one (before a tool runs, before a step's outcome leaves the run). Raises `RunMoved`
        if `run_id`'s events were refused, `StoreUnavailable` if the store did not answer.
        On files: at once (each append is written before it returns)."""

    def state(self, run_id: str) -> RunState: ...

    def events(self, run_id: str) -> list[Event]:
        """Every event of a run (unfinished, or finished and still kept)."""

    def find(self, *, inbound_key: str | None = None, chat_key: str | None = None,
             statuses: frozenset[str] | None = None) -> list[str]:
        """Unfinished runs matching an inbound message or a chat, oldest first."""

    async def preload(self, chat_key: str) -> None:
        """Before a turn of the chat: read its unfinished runs ahead, without holding the
        event loop, so the turn's `find()`s of the chat need no round trip (on files:
        nothing to read)."""

    async def find_inbound(self, inbound_key: str, chat_key: str | None = None) -> list[str]:
        """`find(inbound_key=...)` for the start of a turn (of `chat_key`'s message), which
        must not hold the event loop on a store that answers over the network; the runs
        found are read ahead (their `state()` reads nothing)."""

    async def read_ahead(self, run_ids: list[str]) -> None:
        """Read these runs without holding the event loop, so their `state()` and `events()`
        right after read nothing (a dashboard action on one run)."""

    async def find_open(self, statuses: frozenset[str] | None = None, *,
                        chats: Callable[[str], bool] | None = None) -> list[str]:
        """`find(statuses=...)` of the runs whose chat key `chats` accepts (None: every
        chat), for loops that scan runs (the watchdog, the dashboard, resuming, quiet turns):
        without holding the event loop, and with the runs found read ahead, so their
        `state()` and `events()` read nothing."""

    def claim(self, run_id: str) -> bool:
        """Take the run for this node before resuming it: False if a node that holds its chat
        more recently has it (never drive it then). On files (one node): always True."""

    @property
    def needs_compaction(self) -> bool: ...

    def compact(self) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class ApprovalMap(Protocol):
    """Which platform messages announced which approval (run approvals, task prompts), so that
    a reaction landing on any node finds the approval another node asked for."""

    def remember(self, chat_key: str, platform_ids: list[str], run_id: str,
                 approval_id: str) -> None: ...

    def lookup(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        """`{"run_id", "approval_id"}` the message announced, or None."""

    async def find(self, chat_key: str, platform_id: str) -> dict[str, str] | None:
        """`lookup` for the daemon's loops (a reaction): it does not hold the event loop
        on a store that answers over the network."""

    def forget_run(self, run_id: str) -> None:
        """Drop every message of a finished run."""

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until what was remembered is stored (shutdown, tests)."""


class CronStore(Protocol):
    """The cron jobs as the scheduler, the tool and the operator's commands use them. Shared by
    several schedulers (Redis), it adds what one process never needed: `claim_occurrence`
    (only one node fires a scheduled time) and `advance` (move a job's state on only if nobody
    did meanwhile)."""

    @property
    def shared(self) -> bool:
        """True when other schedulers (other nodes) read and write the same jobs: the
        scheduler then re-reads them every poll and claims each occurrence before firing."""

    def list(self, chat_key: str | None = None) -> list[Job]: ...

    async def refresh(self) -> None:
        """Read the job list ahead, without holding the event loop: the scheduler calls it
        before each round, whose `list()`s then read nothing (on files: nothing to read)."""

    def get(self, job_id: str) -> Job | None: ...

    def __len__(self) -> int: ...

    def add(self, job: Job) -> Job: ...

    def remove(self, job_id: str) -> Job | None: ...

    def update_state(self, job_id: str, *, enabled: bool | None = None,
                     **changes: Any) -> Job:
        """Change state fields and optionally `enabled` at once; KeyError if unknown."""

    def advance(self, job_id: str, expected_next_run_at: str | None, *,
                enabled: bool | None = None, **changes: Any) -> Job | None:
        """`update_state`, but only while the job's `next_run_at` is still
        `expected_next_run_at` (the occurrence just fired); None if the job is gone or was
        moved on meanwhile (by another node, or by the operator)."""

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        """May this scheduler fire the job's occurrence `stamp` now? True for one claimant
        until the claim expires (a node that died mid-fire leaves it to expire)."""


KEEP_FINISHED = 500  # finished tasks a task store keeps (their stories stay longer)


class TaskStore(Protocol):
    """Every task's checkpoint and story, as the engine, the runner, the chat and the dashboard
    use them. A task object returned for a task this node may run is the live one its runner
    mutates; `checkpoint` records its current state. A store that may only write tasks whose
    chat this node holds raises `TaskFenced` for the others (`tasks/model.py`)."""

    problems: list[str]  # records that could not be read, said once (the log, /api/state)

    def get(self, task_id: str) -> TaskState | None: ...

    def list(self, *, status: TaskStatus | None = None, chat_id: str | None = None,
             provider: str | None = None, limit: int | None = None) -> list[TaskState]:
        """Tasks newest first, optionally only one status or one chat, at most `limit`."""

    async def fetch(self, task_id: str) -> TaskState | None:
        """`get` for the daemon's commands and loops: on Redis in the backend's store thread
        (`Backend.offload`), so a slow Redis does not hold the event loop (files: `get`)."""

    async def fetch_list(self, *, chat_id: str, provider: str) -> list[TaskState]:
        """`list` of one chat's tasks, as `fetch` reads."""

    async def fetch_detail_tail(self, task_id: str, count: int) -> list[str]:
        """`detail_tail`, as `fetch` reads."""

    def unfinished(self, *, chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        """Tasks still running or waiting, oldest first; with `chats`, only those whose chat
        key it accepts (the engine's "chats this node holds": cheap to ask every second)."""

    async def fetch_unfinished(self, *,
                               chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        """`unfinished`, as `fetch` reads (/stop's scan of its chat's tasks)."""

    def count_unfinished(self) -> int:
        """How many tasks are running or waiting (for /api/state: cheap on every store)."""

    async def add(self, task: TaskState) -> None:
        """Store a new task (ValueError for a bad or existing id)."""

    async def checkpoint(self, task: TaskState) -> None:
        """Record `task`'s current state durably (raises `TaskFenced` where not allowed)."""

    async def record_answer(self, task: TaskState) -> None:
        """Record a person's answer, or a cancel, on a task no loop drives here: a
        checkpoint, which on Redis may also come from a node that does not hold the task's
        chat, for a task that waits (backends/redis/tasks.py)."""

    def detail_location(self, task_id: str) -> Path | str:
        """Where the task's story is kept (a file, or a Redis key), for the events' field."""

    async def append_detail(self, task_id: str, line: str, *,
                            at: float | None = None) -> Path | str:
        """Append one line of the task's story; returns `detail_location(task_id)`."""

    def detail_tail(self, task_id: str, count: int) -> list[str]:
        """The last `count` lines of the task's story (`- <time> <text>`), oldest first."""


class ProposalMap(Protocol):
    """Plans under review, one per chat, so an answer handled on another node finds its plan."""

    async def get(self, chat_key: str) -> Proposal | None:
        """The chat's plan under review, or None; on Redis read once per chat lease, on the
        asynchronous client (a slow Redis holds the chat, not the loop)."""

    async def put(self, chat_key: str, proposal: Proposal) -> None:
        """Keep `proposal` as the chat's plan under review (it replaces any other); on Redis
        one round trip on the asynchronous client, so a slow Redis does not hold the loop."""

    async def pop(self, chat_key: str) -> Proposal | None:
        """Take the chat's plan off review (answered, dropped, replaced, /stop): it, or None
        if there was none; as `put`, off the event loop."""


class WorkflowLog(Protocol):
    """Where workflow events are kept: append with dedupe by `event_id`, read the newest back."""

    def seen(self, event_id: str) -> bool: ...

    async def record(self, record: dict[str, Any]) -> bool:
        """Append `record` unless its `event_id` was recorded before (then False)."""

    def recent(self, count: int) -> list[dict[str, Any]]:
        """The last `count` records, oldest first."""

    async def close(self) -> None: ...


class DecisionStore(Protocol):
    """Where decisions are kept; every method is atomic on its own. The priority rule
    (`decision/rules.py`) must hold across nodes, so it is applied inside the store's own
    atomic write (`put_unless_kept`), not read-then-written by the service."""

    def all(self) -> dict[str, Decision]:
        """Every stored entry by its key as stored (on Redis: as the last `refresh` read
        them, with this node's own changes since)."""

    async def refresh(self) -> None:
        """Read the entries ahead without holding the event loop (before a turn, on each
        ops tick, for the dashboard), for the `all()`s that follow (on files: nothing to
        read)."""

    def get(self, key: str) -> Decision | None: ...

    def put_unless_kept(self, decision: Decision) -> Decision:
        """Store `decision` unless `keeps_current` says the stored one stays; the decision in
        force afterwards."""

    def delete(self, key: str) -> bool: ...

    def dedupe(self) -> int:
        """Replace the entries by `merge_canonical(...)` of them; how many went."""


class EntriesChanged(StoreConflict):
    """`SecretEntries.replace` found the entries changed since they were read (another node
    wrote one)."""


class SecretEntries(Protocol):
    """Where the vault's sealed entries live. Only ciphertexts pass through here; the key stays
    with `SecretVault` and never reaches a store. Each method is one atomic change: the vault
    calls them under its lock, which makes the file's read-modify-write safe between the daemon
    and `soulflow secret`; on Redis each change is one script or transaction, because other
    nodes do not share that lock."""

    @property
    def location(self) -> str:
        """Where the entries are, for messages (a path, or a Redis key)."""

    @property
    def shared(self) -> bool:
        """Other nodes, with their own copies of the key file, use the same entries."""

    def key_fingerprint(self, mine: str) -> str:
        """The fingerprint of the key the entries are sealed with (shared entries): `mine`
        is recorded if none is yet. Not the key: a keyed hash that reveals nothing of it."""

    def read(self) -> dict[str, StoredSecret]:
        """Every entry by name."""

    def put(self, entries: Mapping[str, StoredSecret], *, keep_foreign: bool) -> list[str]:
        """Store the entries; with `keep_foreign`, a name already stored under another scope
        is left alone. Returns the names left alone."""

    def delete(self, name: str, *, scope: str | None, any_scope: bool) -> bool:
        """Delete `name` (only if its scope is `scope`, unless `any_scope`); whether it went."""

    def replace(self, expected: Mapping[str, StoredSecret],
                entries: Mapping[str, StoredSecret], *, key_fingerprint: str) -> None:
        """Swap every entry at once (key rotation), and the key fingerprint with them;
        `EntriesChanged` if the stored entries are no longer `expected`."""


class HeartbeatStateStore(Protocol):
    """Where the heartbeat's last tick is kept, as the plain mapping `asdict` makes of it."""

    def load(self) -> dict[str, object]: ...

    def save(self, data: dict[str, object]) -> None: ...


USAGE_KEEP_DAYS = 400  # days of model usage kept (a year and its same month back)


@dataclass(frozen=True, slots=True)
class UsageKey:
    """What one model call is counted under: a day (`YYYY-MM-DD` in the workspace's time
    zone), the provider and model that answered, the chat (`provider:chat_id`), the person
    who asked (`provider:user_id`, empty for cron, heartbeat and consolidation) and the source
    (`message`, `task`, `cron`, `heartbeat`, `consolidation`)."""

    day: str
    provider: str
    model: str
    chat: str
    user: str
    source: str


@dataclass(slots=True)
class UsageTotals:
    """Counts under one `UsageKey`: calls, prompt and completion tokens, cost in USD."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: UsageTotals) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd


class UsageStore(Protocol):
    """Model usage summed per day × provider × model × chat × user × source (never one record
    per call, so it stays bounded); days older than the kept window are dropped. Shared by
    every node on Redis."""

    def add(self, key: UsageKey, totals: UsageTotals) -> None:
        """Add one call's counts to its key."""

    def days(self, first_day: str) -> list[tuple[UsageKey, UsageTotals]]:
        """Every key of `first_day` (`YYYY-MM-DD`) and later days, with its totals."""

    async def refresh(self, day: str) -> None:
        """Before a budget check: read `day`'s totals and raises ahead, without holding the
        event loop; `days(day)` and `raises(day)` right after use them (on files: nothing
        to read)."""

    def raise_cap(self, day: str, scope: str, approval_id: str, amount: float) -> None:
        """An approved budget raise for `day`: `scope` (`all:`, `user:<id>`, `chat:<key>`)
        rises by `amount`; idempotent per `approval_id`."""

    def raises(self, day: str) -> dict[str, float]:
        """The raises of `day`, summed per scope."""

    def name(self, user: str, name: str) -> None:
        """Remember a person's display name for their `provider:user_id` (the usage card and
        `soulflow usage` show it); kept about as long as the usage days."""

    def names(self) -> dict[str, str]:
        """Every remembered `provider:user_id` → display name."""


class NoticeClaims(Protocol):
    """`claim(problem key, interval_s)`: may this node tell the problem now? With several
    nodes, True for one of them per interval."""

    def __call__(self, problem: str, ttl_s: float) -> bool: ...


# -- the backend --------------------------------------------------------------------------

LoopFactory = Callable[[], Awaitable[None]]


class Backend(Protocol):
    """Every store the daemon uses, from one backend, built once from the settings
    (`backends/wiring.py`). The stores are built on first use, so a command that needs one of
    them (`soulflow cron`, `soulflow secret`) opens that one only; `stop()` closes what was
    built. Callers never ask which backend this is: `owns(chat)` is the one question about
    which chats are this node's, and `shared` the one about whether other nodes share them."""

    node_id: str

    @property
    def shared(self) -> bool:
        """Other daemons share these stores, so the chats this node owns change while it runs
        (partitions move, leases lapse) and work that must run once in the cluster needs a
        lease: the runtime then runs its takeover loops and elections. False on files (one
        daemon per workspace owns every chat)."""

    # the bus's stores

    @property
    def inbound(self) -> InboundStore: ...

    @property
    def outbox(self) -> OutboxStore: ...

    @property
    def dlq(self) -> DeadLetterStore: ...

    @property
    def inbound_dlq(self) -> InboundDeadLetterStore: ...

    @property
    def cursors(self) -> CursorStore: ...

    @property
    def leases(self) -> LeaseStore: ...

    # the agent's and the services' stores

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def runs(self) -> RunJournal:
        """Agent runs; on Redis each write carries the fencing token of the partition lease
        under which this node holds the run's chat."""

    @property
    def approvals(self) -> ApprovalMap:
        """The platform messages that announced a run's approval."""

    @property
    def task_prompts(self) -> ApprovalMap:
        """The platform messages of task prompts (task id in the `run_id` slot, node id in the
        `approval_id` slot)."""

    @property
    def cron(self) -> CronStore: ...

    @property
    def tasks(self) -> TaskStore:
        """On Redis a task is written only under the lease of its chat's partition."""

    @property
    def proposals(self) -> ProposalMap: ...

    @property
    def workflow(self) -> WorkflowLog: ...

    @property
    def decisions(self) -> DecisionStore: ...

    @property
    def secrets(self) -> SecretEntries:
        """The vault's sealed entries (the key stays on this node's disk)."""

    @property
    def heartbeat(self) -> HeartbeatStateStore: ...

    @property
    def usage(self) -> UsageStore:
        """Model usage per day, provider, model, chat, user and source."""

    @property
    def notice_claims(self) -> NoticeClaims | None:
        """Who tells a lasting problem, across the nodes; None: this node alone tells it."""

    # lifecycle and ownership

    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Flush and close every store built (a clean stop hands the partitions back); also
        after a failed or missing start (a command builds a backend and never starts it)."""

    def loops(self) -> dict[str, LoopFactory]:
        """Background loops this backend needs, by name, for the daemon's supervisor (the file
        backend's journal syncer)."""

    def owns(self, chat_key: str) -> bool:
        """True while this node may run the chat's work (`provider:chat_id`): it holds the
        chat's partition. State of a chat read by a node is only trusted while this holds."""

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        """Call `callback` (in the event loop) after the set of chats this node owns changed:
        a rebalance took or gave back partitions, or a lease lapsed. Never on the file backend."""

    def hold_chats(self, running: Callable[[], Iterable[str]]) -> None:
        """The chats in `running()` (work this node drives now: agent runs, task graphs) are
        work in hand, which a rebalance never gives away (nothing to do on files)."""

    def status(self) -> dict[str, Any]:
        """For /api/state and the page: kind, node id, whether the store answers (and since
        when not), the last error (no credentials), partitions held / total."""

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        """The operator's one sentence for a store that failed where nothing can carry on (the
        vault opened at boot, a command on the stores)."""

    async def offload(self, call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a synchronous store call from a loop of the daemon where it cannot hold the
        event loop: on Redis in the backend's store thread (one at a time, in order), on
        files right here (local and fast, and those stores are not made for threads)."""
