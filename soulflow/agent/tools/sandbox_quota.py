"""The disk-quota watcher of one `exec` call: it stops the sandbox as soon as the call is
over its budget, so the disk never holds much more than the quota while the call runs.

Three things bound what a call can write (`soulflow.security.quota.ExecBudget` says how
much it may add to its chat folder):

* ``RLIMIT_FSIZE`` at the budget plus one byte: no single file can grow past it;
* the private ``/tmp`` and ``/dev/shm`` are tmpfs mounts of the budget's size;
* this watcher: it measures the chat folder (a walk through the folder's descriptor, that
  stops just past the file budget) and the sandbox's tmpfs counters, and returns the
  reason once the call is over, which kills the sandbox (`CodeSandbox.run`'s monitor).

Between two checks a command can still write what the disk takes in that time; the final
measurement after the call (`ExecBudget.settle`) is exact and undoes the excess either way.
The checks are spaced so that the watcher spends at most `MAX_SHARE` of one core: a walk
that took 3 ms is followed by a pause of at least 27 ms, and never less than
`MIN_INTERVAL_S` (the first pause is set by the snapshot's time, so a short call in a big
folder is not walked three times). While nothing changes (a command that computes, sleeps
or waits on the network) the pause doubles up to `IDLE_INTERVAL_S`; the first change
brings it back down.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from soulflow.agent.tools.sandbox import SandboxView
from soulflow.security.quota import ExecBudget
from soulflow.storage.tree_usage import Usage

MIN_INTERVAL_S = 0.05
IDLE_INTERVAL_S = 0.2
MAX_SHARE = 0.1


@dataclass(slots=True)
class QuotaWatcher:
    """A `Monitor` for `CodeSandbox.run`; ``checks`` and ``busy_s`` say what it cost."""

    budget: ExecBudget
    tmp_bytes: int | None  # the size the sandbox's tmpfs mounts were given (None: unsized)
    tmp_skeleton: int = 0  # entries bwrap makes there itself (`bwrap.tmpfs_skeleton`)
    min_interval_s: float = MIN_INTERVAL_S
    idle_interval_s: float = IDLE_INTERVAL_S
    max_share: float = MAX_SHARE
    checks: int = 0
    busy_s: float = 0.0
    _idle_pause: float = 0.0
    _last: tuple[Usage, Usage] | None = None

    async def __call__(self, view: SandboxView) -> str:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._pause())
            started = loop.time()
            tmp = view.tmpfs_usage(self.tmp_bytes, self.tmp_skeleton)
            reason = await _finished(loop.run_in_executor(None, self.budget.check, tmp))
            self.checks += 1
            self.busy_s += loop.time() - started
            if reason is not None:
                return reason
            seen = (self.budget.last_usage, tmp)
            still = seen == self._last
            self._last = seen
            self._idle_pause = min(self.idle_interval_s, self._idle_pause * 2 or
                                   self.min_interval_s) if still else 0.0

    def _pause(self) -> float:
        # before the first check, the snapshot's time says what a walk of the folder costs
        last = self.busy_s / self.checks if self.checks else self.budget.snapshot_s
        share = last * (1 - self.max_share) / self.max_share
        return max(self.min_interval_s, share, self._idle_pause)


async def _finished(work: asyncio.Future[str | None]) -> str | None:
    """``work``'s result; when cancelled, first wait for the thread to finish, so nothing
    measures the chat folder after the call has closed its descriptor."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        raise
