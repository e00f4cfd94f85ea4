"""The cron jobs on files: ``runtime/cron/cron-store.json``, one small JSON file rewritten
atomically, ``{"version": 1, "jobs": {"<id>": <a job's record, cron/jobs.py>}}``.

Every change rewrites the whole file (temp file, fsync, rename), so a crash leaves the old or
the new job list, never half of one. A file that cannot be read - invalid JSON, an unknown
version, a job that does not validate - is moved aside (never deleted) and the jobs that are
still valid are kept: losing one broken job must not silently drop all the others.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from soulflow.cron.jobs import STATE_FIELDS, Job
from soulflow.storage.atomic import quarantine, read_json, write_json_atomic

log = logging.getLogger(__name__)

STORE_VERSION = 1


class FileCronStore:
    """`CronStore` in one JSON file: the job list, loaded once and written through on every
    change.

    Single-writer by design: the daemon holds the workspace lock, and every caller runs on
    its event loop, so the in-memory copy is always the truth and needs no re-reading.
    """

    shared = False  # one daemon per workspace: no other scheduler to coordinate with

    def __init__(self, path: Path) -> None:
        self.path = path
        self._jobs: dict[str, Job] = self._load()

    # -- reading -------------------------------------------------------------------------

    def list(self, chat_key: str | None = None) -> list[Job]:
        """Jobs in creation order, optionally only those of one chat (``provider:chat_id``)."""
        jobs = sorted(self._jobs.values(), key=lambda j: (j.created_at, j.id))
        return [j for j in jobs if chat_key is None or j.chat.key == chat_key]


    async def refresh(self) -> None:
        """Nothing to read ahead: the jobs are in memory."""

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def __len__(self) -> int:
        return len(self._jobs)

    # -- changes (each one is persisted before it returns) -------------------------------

    def add(self, job: Job) -> Job:
        if job.id in self._jobs:
            raise ValueError(f"a cron job with id {job.id!r} already exists")
        self._jobs[job.id] = job
        self._save()
        return job

    def remove(self, job_id: str) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._save()
        return job

    def enable(self, job_id: str, enabled: bool) -> Job:
        return self._replace(self._require(job_id), enabled=enabled)

    def update_state(self, job_id: str, *, enabled: bool | None = None,
                     **changes: Any) -> Job:
        """Change state fields (``next_run_at=...``, ``runs=...``) and optionally ``enabled``
        in one write, so a fired ``at`` job is never persisted half-updated."""
        unknown = set(changes) - STATE_FIELDS
        if unknown:
            raise TypeError(f"unknown job state field(s): {', '.join(sorted(unknown))}")
        job = self._require(job_id)
        new_state = replace(job.state, **changes)
        if enabled is None:
            return self._replace(job, state=new_state)
        return self._replace(job, state=new_state, enabled=enabled)

    def advance(self, job_id: str, expected_next_run_at: str | None, *,
                enabled: bool | None = None, **changes: Any) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state.next_run_at != expected_next_run_at:
            return None
        return self.update_state(job_id, enabled=enabled, **changes)

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        return True  # the only scheduler of this workspace

    # -- internals -----------------------------------------------------------------------

    def _require(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(f"no cron job with id {job_id!r}")
        return job

    def _replace(self, job: Job, **changes: Any) -> Job:
        updated = replace(job, **changes)
        self._jobs[job.id] = updated
        self._save()
        return updated

    def _save(self) -> None:
        data = {"version": STORE_VERSION,
                "jobs": {job.id: job.to_dict() for job in self.list()}}
        write_json_atomic(self.path, data)

    def _load(self) -> dict[str, Job]:
        data = read_json(self.path, None)  # invalid JSON is quarantined there
        if data is None:
            return {}
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION or \
                not isinstance(data.get("jobs"), dict):
            quarantine(self.path, f"not a version-{STORE_VERSION} cron store")
            return {}
        jobs: dict[str, Job] = {}
        broken: list[str] = []
        for key, raw in data["jobs"].items():
            try:
                job = Job.from_dict(raw)
            except ValueError as exc:
                broken.append(f"{key}: {exc}")
                continue
            jobs[job.id] = job
        if broken:
            moved = quarantine(self.path, "invalid cron job(s): " + "; ".join(broken))
            log.error("kept %d valid cron job(s); the original file is at %s", len(jobs), moved)
            self._jobs = jobs
            self._save()
        return jobs
