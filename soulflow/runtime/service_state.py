"""Where the cluster services' state lives: files under runtime/, or Redis
(SOULFLOW_BACKEND=redis): the cron jobs, the decisions and the vault's sealed entries.

They keep their synchronous API and, on Redis, use the daemon's one synchronous client
(`agent_state.state_redis`); `soulflow cron` and `soulflow secret` open the same stores the
same way, so on Redis they write where every node reads. The Redis stores are imported only on
the redis backend. The heartbeat's state and the ops notices are wired in ops/assembly.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from soulflow.backends.base import Backend, BackendUnavailable
from soulflow.config import Settings
from soulflow.cron.store import CronStore, Job, JobStore, PayloadKind
from soulflow.decision.service import DecisionService
from soulflow.errors import StoreError
from soulflow.runtime.agent_state import state_redis
from soulflow.security.protected import open_vault
from soulflow.security.vault import SecretVault

if TYPE_CHECKING:
    from soulflow.backends.redis.sync_client import StateRedis

__all__ = ["cli_state", "cron_fires_here", "cron_store", "decision_service", "redis_failure",
           "vault"]


def cron_store(settings: Settings, state: StateRedis | None) -> JobStore:
    """`runtime/cron/cron-store.json`, or the Redis hash every node's scheduler reads. An
    occurrence a node claimed and did not finish (it died) waits one lease TTL."""
    if state is None:
        return CronStore(settings.runtime_dir / "cron" / "cron-store.json")
    from soulflow.backends.redis.cron import RedisCronStore

    return RedisCronStore(state, claim_ttl_s=float(settings["REDIS_LEASE_TTL_S"]))


def cron_fires_here(backend: Backend) -> Callable[[Job], bool]:
    """CronService's `may_fire`: a `system_event` job runs a quiet turn on the node that fires
    it, so only the node holding its chat fires it (where all of that chat's work runs); an
    `agent_turn` job becomes an inbound message, answered by the chat's holder wherever it
    fired. Always True on the file backend (every chat is this node's)."""
    def fires_here(job: Job) -> bool:
        return job.kind is not PayloadKind.SYSTEM_EVENT or backend.owns(job.chat.key)
    return fires_here


def decision_service(settings: Settings, state: StateRedis | None) -> DecisionService:
    """`runtime/decisions/index.json`, or the Redis hash."""
    if state is None:
        return DecisionService(settings.runtime_dir / "decisions" / "index.json")
    from soulflow.backends.redis.decisions import RedisDecisions

    return DecisionService(records=RedisDecisions(state))


def vault(settings: Settings, state: StateRedis | None) -> SecretVault:
    """The vault with the key from this node's disk (`SOULFLOW_MASTER_KEY_FILE`) and its
    sealed entries in `secrets.json`, or in the Redis hash (the key never goes there).

    On Redis, opening it already reads Redis (is this node's key the one the entries are
    sealed with?), before the backend's own check: a Redis that does not answer is the same
    one sentence (`BackendUnavailable`) here."""
    if state is None:
        return open_vault(settings)
    from soulflow.backends.redis.vault import RedisSecretEntries

    try:
        return open_vault(settings, entries=RedisSecretEntries(state))
    except StoreError as exc:
        raise redis_failure(settings, exc) from None


def redis_failure(settings: Settings, exc: Exception) -> BackendUnavailable:
    """One sentence for the operator about a Redis call that failed (the password hidden)."""
    from soulflow.backends.redis.backend import redis_failure as sentence

    return BackendUnavailable(sentence(settings["REDIS_URL"], exc))


@contextmanager
def cli_state(settings: Settings) -> Iterator[StateRedis | None]:
    """For `soulflow cron` / `soulflow secret` without a daemon: the synchronous Redis client
    (None on the file backend), closed afterwards; a Redis that fails meanwhile is one
    sentence for the operator (`BackendUnavailable`), not a traceback."""
    state = state_redis(settings)
    if state is None:
        yield None
        return
    try:
        yield state
    except StoreError as exc:
        raise redis_failure(settings, exc) from None
    finally:
        state.close()
