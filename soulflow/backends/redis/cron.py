"""The cron store on Redis: every node's scheduler sees the same jobs, and each scheduled time
fires on one node.

* `cron:jobs` - hash: job id → the job's json (the same object as one entry of the file's
  ``jobs``). Every read goes to Redis (another node, the dashboard or ``soulflow cron`` may
  have changed a job since); a job whose record does not validate is logged and skipped, never
  deleted.
* `cron:fire:<job id>:<occurrence>` - string with a TTL: the node that claimed this
  occurrence (`SET NX PX`). One claimant fires it; a node that dies between firing and
  advancing the job leaves the claim to expire, and the next claimant fires it again with the
  same inbound message id, which the shared seen ids drop if the first one got through.

* `cron:version` - counter: bumped by every change of a job, in the same atomic step. Every
  node's scheduler lists the jobs every second; `list()` keeps the last listing with the
  version it was read at and re-reads the hash only when the version moved, so an unchanged
  job list costs one `GET` per listing, not the whole hash. The scheduler's round begins with
  `refresh()`, that same check on the asynchronous client, and the listings of that round
  (within `LISTING_FRESH_S`) use what it read: the scheduler's loop never waits for Redis
  with the event loop held. Any other `list()` (a command, the dashboard, a round's own
  write) checks the version itself.

State changes are one Lua script over the job's record (`CRON_UPDATE`): it checks the
expected ``next_run_at`` (for `advance`) and writes the new state in the same step, so a
scheduler never moves a job back over another node's write, and an operator's `disable` on
one node is never undone by a fire on another.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text
from soulflow.cron.jobs import STATE_FIELDS, Job

__all__ = ["RedisCronStore"]

log = logging.getLogger(__name__)

# KEYS: jobs hash, version counter. ARGV: job id, state changes (json), enabled ('' keep, '1', '0'),
# check ('1': only if state.next_run_at equals ARGV[5], json), expected next_run_at (json).
# Returns {'missing'}, {'moved'} or {'ok', new job json}.
CRON_UPDATE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'missing'} end
local job = cjson.decode(raw)
if type(job.state) ~= 'table' then job.state = {} end
if ARGV[4] == '1' then
  local current = job.state.next_run_at
  if current == nil then current = cjson.null end
  if current ~= cjson.decode(ARGV[5]) then return {'moved'} end
end
for field, value in pairs(cjson.decode(ARGV[2])) do job.state[field] = value end
if ARGV[3] == '1' then job.enabled = true elseif ARGV[3] == '0' then job.enabled = false end
local encoded = cjson.encode(job)
redis.call('HSET', KEYS[1], ARGV[1], encoded)
redis.call('INCR', KEYS[2])
return {'ok', encoded}
"""


LISTING_FRESH_S = 0.5  # how long a `refresh()` answers the listings that follow it


class RedisCronStore:
    """`CronStore` on Redis (see the module docstring); synchronous, like the file store."""

    shared = True

    def __init__(self, state: StateRedis, *, claim_ttl_s: float = 6.0,
                 client: AsyncStoreRedis | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`claim_ttl_s`: how long a claimed occurrence is held; a node that died mid-fire
        delays that occurrence by this much (firing itself takes milliseconds: it queues a
        message)."""
        self._client = state.client
        self._keys = ServiceKeys(state.prefix)
        self.claim_ttl_s = claim_ttl_s
        self._update = self._client.register_script(CRON_UPDATE)
        self._listed: tuple[bytes | None, list[Job]] | None = None  # (version, jobs)
        self._async = client  # for `refresh`
        self._clock = clock
        self._refreshed_at = float("-inf")  # when `refresh` last confirmed `_listed`

    # -- reading -------------------------------------------------------------------------

    def list(self, chat_key: str | None = None) -> list[Job]:
        jobs = self._all()
        return [j for j in jobs if chat_key is None or j.chat.key == chat_key]

    def _all(self) -> list[Job]:
        """Every job in creation order: the last listing if the version did not move since
        (one GET), else the hash and the version read together (MULTI)."""
        if self._listed is not None and \
                self._clock() - self._refreshed_at < LISTING_FRESH_S:
            return list(self._listed[1])
        version = self._client.get(self._keys.cron_version)
        if self._listed is not None and version is not None and self._listed[0] == version:
            return list(self._listed[1])
        with self._client.pipeline(transaction=True) as pipe:
            pipe.get(self._keys.cron_version)
            pipe.hvals(self._keys.cron_jobs)
            version, raws = pipe.execute()
        return self._keep(version, raws)

    async def refresh(self) -> None:
        if self._async is None:
            return
        version = await self._async.get(self._keys.cron_version)
        if self._listed is None or version is None or self._listed[0] != version:
            async with self._async.pipeline(transaction=True) as pipe:
                pipe.get(self._keys.cron_version)
                pipe.hvals(self._keys.cron_jobs)
                version, raws = await pipe.execute()
            self._keep(version, raws)
        self._refreshed_at = self._clock()

    def _keep(self, version: bytes | None, raws: list[Any]) -> list[Job]:
        jobs = [job for job in (self._parse(raw) for raw in raws) if job is not None]
        jobs.sort(key=lambda j: (j.created_at, j.id))
        self._listed = (version, jobs)
        return list(jobs)

    def _changed_here(self) -> None:
        """This node changed a job: its next listing reads the version again."""
        self._refreshed_at = float("-inf")

    def get(self, job_id: str) -> Job | None:
        raw = self._client.hget(self._keys.cron_jobs, job_id)
        return None if raw is None else self._parse(raw)

    def __len__(self) -> int:
        return int(self._client.hlen(self._keys.cron_jobs))

    # -- changes -------------------------------------------------------------------------

    def add(self, job: Job) -> Job:
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(self._keys.cron_jobs, job.id, _dump(job.to_dict()))
            pipe.incr(self._keys.cron_version)
            added, _ = pipe.execute()
        self._changed_here()
        if not added:
            raise ValueError(f"a cron job with id {job.id!r} already exists")
        return job

    def remove(self, job_id: str) -> Job | None:
        key = self._keys.cron_jobs
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hget(key, job_id)
            pipe.hdel(key, job_id)
            pipe.incr(self._keys.cron_version)
            raw, _, _ = pipe.execute()
        self._changed_here()
        return None if raw is None else self._parse(raw)

    def enable(self, job_id: str, enabled: bool) -> Job:
        return self.update_state(job_id, enabled=enabled)

    def update_state(self, job_id: str, *, enabled: bool | None = None,
                     **changes: Any) -> Job:
        job = self._apply(job_id, enabled, changes, check=False, expected=None)
        if job is None:
            raise KeyError(f"no cron job with id {job_id!r}")
        return job

    def advance(self, job_id: str, expected_next_run_at: str | None, *,
                enabled: bool | None = None, **changes: Any) -> Job | None:
        return self._apply(job_id, enabled, changes, check=True,
                           expected=expected_next_run_at)

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        return bool(self._client.set(self._keys.cron_fire(job_id, stamp), "1", nx=True,
                                     px=max(1, int(self.claim_ttl_s * 1000))))

    # -- internals -----------------------------------------------------------------------

    def _apply(self, job_id: str, enabled: bool | None, changes: dict[str, Any], *,
               check: bool, expected: str | None) -> Job | None:
        unknown = set(changes) - STATE_FIELDS
        if unknown:
            raise TypeError(f"unknown job state field(s): {', '.join(sorted(unknown))}")
        flag = "" if enabled is None else ("1" if enabled else "0")
        reply = self._update(keys=[self._keys.cron_jobs, self._keys.cron_version],
                             args=[job_id, _dump(changes) if changes else "{}", flag,
                                   "1" if check else "0", json.dumps(expected)])
        self._changed_here()
        if text(reply[0]) != "ok":  # missing, or (advance) moved on meanwhile
            return None
        return self._parse(reply[1])

    @staticmethod
    def _parse(raw: bytes | str) -> Job | None:
        try:
            return Job.from_dict(json.loads(raw))
        except ValueError as exc:  # json errors are ValueErrors too
            log.error("cron: skipping an unreadable job record in Redis (%s): %.200s", exc,
                      text(raw))
            return None


def _dump(data: dict[str, Any]) -> str:
    # raw UTF-8, not \\u escapes: Lua's cjson re-encodes what it decodes, byte for byte
    return json.dumps(data, ensure_ascii=False)
