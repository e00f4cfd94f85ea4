"""Key names of the Redis backend, in one place (docs/scaling.md lists them for operators).

Every key starts with the configured prefix (`REDIS_KEY_PREFIX`, default `soulflow:`), so
several bots can share one Redis and a test can use a fresh namespace.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

GROUP = "workers"  # the consumer group of every inbound stream

# A partition: a shared one (an int below REDIS_PARTITIONS, leased by whichever node takes it)
# or a node's private one (`node:<node id>`, held only by that node: its local chats).
Part = int | str

# The local channel on a shared backend names its chats `<chat>@<node id>` (channels/local.py;
# a chat id never holds an '@'), so a node's local chats are told apart from another node's.
_LOCAL_PREFIX = "local:"


def private_part(node_id: str) -> str:
    """The private partition of a node: its local chats, their turns, runs and replies."""
    return f"node:{node_id}"


def local_node_of(chat_key: str) -> str | None:
    """The node whose local chat `chat_key` is (`local:<chat>@<node>`), else None."""
    if not chat_key.startswith(_LOCAL_PREFIX):
        return None
    _, at, node = chat_key[len(_LOCAL_PREFIX):].partition("@")
    return node if at and node else None


def partition_of(chat_key: str, partitions: int) -> Part:
    """The partition of a chat (`provider:chat_id`): a node's own local chat is in the node's
    private partition; any other chat in a shared one by CRC32 (stable across processes and
    Python versions; the built-in hash() is salted per process)."""
    node = local_node_of(chat_key)
    if node is not None:
        return private_part(node)
    return zlib.crc32(chat_key.encode("utf-8", "surrogatepass")) % partitions


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str
    partitions: int

    def stream(self, part: Part) -> str:
        """Inbound stream of one partition of chats (consumer group `workers`)."""
        return f"{self.prefix}in:{part}"

    @property
    def inbound_pending(self) -> str:
        """Hash: inbound key → `part|entry id|message json`, until completed."""
        return f"{self.prefix}in:pending"

    def seen(self, key: str) -> str:
        """String with a TTL: the message id was taken in (or primed) and must not be again."""
        return f"{self.prefix}seen:{key}"

    def lease(self, name: str) -> str:
        """String `owner|token` with a TTL while the lease is held."""
        return f"{self.prefix}lease:{name}"

    def fence(self, name: str) -> str:
        """Counter: the last fencing token handed out for a lease name (never expires)."""
        return f"{self.prefix}fence:{name}"

    @staticmethod
    def partition_lease(part: Part) -> str:
        """Lease name of a partition: `part:<n>`, or `node:<id>` for a node's private one."""
        return part if isinstance(part, str) else f"part:{part}"

    @property
    def nodes(self) -> str:
        """Sorted set: node id → the server time (ms) until which it counts as alive."""
        return f"{self.prefix}nodes"

    @property
    def outbox_messages(self) -> str:
        """Hash: outbound message id → message json (written once)."""
        return f"{self.prefix}out:msg"

    @property
    def outbox_state(self) -> str:
        """Hash: outbound message id → `attempts|next_at|in_flight|last error`."""
        return f"{self.prefix}out:state"

    def outbox_order(self, part: Part) -> str:
        """Sorted set: outbound message ids of one partition, scored by insertion sequence."""
        return f"{self.prefix}out:part:{part}"

    @property
    def outbox_sequence(self) -> str:
        return f"{self.prefix}out:seq"

    def answered(self, inbound_key: str) -> str:
        """String with a TTL: a reply to this inbound message was queued."""
        return f"{self.prefix}answered:{inbound_key}"

    @property
    def dlq_outbound(self) -> str:
        return f"{self.prefix}dlq:outbound"

    @property
    def dlq_inbound(self) -> str:
        return f"{self.prefix}dlq:inbound"

    def cursors(self, channel: str) -> str:
        """Hash: cursor name → json value, for one channel (account)."""
        return f"{self.prefix}cursors:{channel}"


@dataclass(frozen=True, slots=True)
class AgentKeys:
    """Keys of the agent's state (sessions, run journals, approval prompts): synchronous stores
    over `StateRedis` (backends/redis/sync_client.py); no partition count needed."""

    prefix: str

    def session(self, key: str) -> str:
        """List: a session's messages, oldest first (json each)."""
        return f"{self.prefix}session:{key}"

    @property
    def sessions_meta(self) -> str:
        """Hash: session key → metadata json (`_type`, `key`, `created_at`), set once."""
        return f"{self.prefix}sessions:meta"

    @property
    def sessions_updated(self) -> str:
        """Sorted set: session key → time of its last message (list_sessions, newest first)."""
        return f"{self.prefix}sessions:updated"

    @property
    def sessions_bytes(self) -> str:
        """Hash: session key → bytes of its stored messages."""
        return f"{self.prefix}sessions:bytes"

    def run(self, run_id: str) -> str:
        """List: one agent run's events (json each); expires a while after the run finished."""
        return f"{self.prefix}run:{run_id}"

    @property
    def runs_open(self) -> str:
        """Sorted set: unfinished run id → start time (ms), for listings in start order."""
        return f"{self.prefix}runs:open"

    @property
    def runs_meta(self) -> str:
        """Hash: unfinished run id → json {status, chat, inbound, task}."""
        return f"{self.prefix}runs:meta"

    @property
    def runs_inbound(self) -> str:
        """Hash: inbound message key → id of the unfinished run it started."""
        return f"{self.prefix}runs:inbound"

    @property
    def runs_fence(self) -> str:
        """Hash: unfinished run id → fencing token of the partition lease it was last driven
        under; a write under an older token is refused (the run moved to another node)."""
        return f"{self.prefix}runs:fence"

    def runs_of_chat(self, chat_key: str) -> str:
        """Set: ids of a chat's unfinished runs (`provider:chat_id`), for find(chat_key=…)."""
        return f"{self.prefix}runs:chat:{chat_key}"

    def approvals(self, name: str) -> str:
        """Hash: `chat_key:platform message id` → json {run_id, approval_id}."""
        return f"{self.prefix}approvals:{name}"

    def approvals_of_run(self, name: str, run_id: str) -> str:
        """Set: the fields of `approvals(name)` that point at one run (forget_run)."""
        return f"{self.prefix}approvals:{name}:run:{run_id}"


@dataclass(frozen=True, slots=True)
class ServiceKeys:
    """Keys of the cluster services (cron, decisions, vault, heartbeat, ops notices): synchronous
    stores over `StateRedis`; no partition count needed."""

    prefix: str

    @property
    def cron_jobs(self) -> str:
        """Hash: cron job id → job json (the file store's job object)."""
        return f"{self.prefix}cron:jobs"

    @property
    def cron_version(self) -> str:
        """Counter: bumped with every change of a cron job (a node re-lists only then)."""
        return f"{self.prefix}cron:version"

    def cron_fire(self, job_id: str, stamp: str) -> str:
        """String with a TTL: the node that claimed this occurrence of the job fires it."""
        return f"{self.prefix}cron:fire:{job_id}:{stamp}"

    @property
    def decisions(self) -> str:
        """Hash: canonical decision key → json {value, priority, source, updated_at}."""
        return f"{self.prefix}decisions"

    @property
    def vault(self) -> str:
        """Hash: secret name → json {ciphertext, updated_at, scope?} (never a key)."""
        return f"{self.prefix}vault:secrets"

    @property
    def vault_key_check(self) -> str:
        """String: a keyed fingerprint of the key the vault's entries are sealed with (not
        the key; it tells a node with another key file at startup)."""
        return f"{self.prefix}vault:key_check"

    @property
    def heartbeat_state(self) -> str:
        """Hash: the heartbeat's last tick (last_tick_at, last_status, last_outcome)."""
        return f"{self.prefix}heartbeat:state"

    def usage_day(self, day: str) -> str:
        """Hash with a TTL of the kept days: model usage of one day (`YYYY-MM-DD`), fields
        `<row json>|n|p|c|usd` (calls, prompt and completion tokens, cost)."""
        return f"{self.prefix}usage:day:{day}"

    def usage_raise(self, day: str) -> str:
        """Hash with the same TTL: budget raises approved that day, `<scope>|<approval>` → USD."""
        return f"{self.prefix}usage:raise:{day}"

    @property
    def usage_days(self) -> str:
        """Set: the days that have a usage hash (read side prunes days whose hash expired)."""
        return f"{self.prefix}usage:days"

    @property
    def usage_names(self) -> str:
        """Hash with the usage TTL: `provider:user_id` → a person's display name."""
        return f"{self.prefix}usage:names"

    def notice(self, problem: str) -> str:
        """String with a TTL: a node told the notice chat about this problem (one per interval
        across the cluster)."""
        return f"{self.prefix}ops:notice:{problem}"


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """Keys of tasks and workflow events (backends/redis/tasks.py, events.py): synchronous
    stores over `StateRedis`; the partition of a task's chat comes from the backend's leases."""

    prefix: str

    @property
    def tasks(self) -> str:
        """Hash: task id → the task's checkpoint (json), one field per task."""
        return f"{self.prefix}tasks:rec"

    @property
    def tasks_index(self) -> str:
        """Hash: task id → `revision|chat key` (checked and written with every checkpoint)."""
        return f"{self.prefix}tasks:idx"

    @property
    def tasks_open(self) -> str:
        """Set: ids of unfinished tasks (running or waiting)."""
        return f"{self.prefix}tasks:open"

    @property
    def tasks_created(self) -> str:
        """Sorted set: task id by creation time (newest-first listings)."""
        return f"{self.prefix}tasks:created"

    @property
    def tasks_finished(self) -> str:
        """Sorted set: finished task id by last update (the oldest are pruned)."""
        return f"{self.prefix}tasks:finished"

    def tasks_of_chat(self, chat_key: str) -> str:
        """Sorted set: the task ids of one chat (`provider:chat_id`) by creation time."""
        return f"{self.prefix}tasks:chat:{chat_key}"

    def task_details(self, task_id: str) -> str:
        """List: the task's story, one `- <time> <text>` line per entry."""
        return f"{self.prefix}tasks:details:{task_id}"

    @property
    def proposals(self) -> str:
        """Hash: chat key → the task plan under review in that chat (json)."""
        return f"{self.prefix}tasks:proposals"

    @property
    def workflow_events(self) -> str:
        """Stream (capped with MAXLEN ~): workflow events, field `e` = the event's json."""
        return f"{self.prefix}events:workflow"

    def workflow_seen(self, event_id: str) -> str:
        """String with a TTL: this workflow event id was recorded (dedupe across nodes)."""
        return f"{self.prefix}events:seen:{event_id}"
