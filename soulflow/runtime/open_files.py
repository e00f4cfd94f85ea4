"""The daemon's open-files limit: the soft `RLIMIT_NOFILE` raised to the hard limit at start.

Every socket, journal and pipe is a file descriptor. The soft limit is often 1024 while the
hard one is far higher (systemd: 524288); the soft one is what binds, so a burst of
connections (the dashboard's, bounded by its caps, plus the channels' and providers') could
run into it long before the machine would. Raising the soft limit to the hard one is what
the hard limit is for and needs no privilege. The dashboard fits its caps to the result
(`ConnectionLimits.within`).
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenFilesLimit:
    """The soft limit before and after, and the hard limit (resource.RLIM_INFINITY if none)."""

    before: int
    soft: int
    hard: int


def _ceiling(hard: int) -> int:
    """The highest soft limit allowed: the hard limit, or with none the kernel's per-process
    maximum (`fs.nr_open`; a soft limit of "infinity" is refused)."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(open("/proc/sys/fs/nr_open").read())  # noqa: SIM115 - tiny /proc read
    except (OSError, ValueError):
        return -1


def raise_open_files_limit() -> OpenFilesLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit and log the numbers once."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if target <= before:
        log.info("open-files limit %d (hard limit %s)", before,
                 "none" if hard == resource.RLIM_INFINITY else hard)
        return OpenFilesLimit(before, before, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open-files limit stays at %d (hard limit %d): %s", before, hard, exc)
        return OpenFilesLimit(before, before, hard)
    log.info("open-files limit raised from %d to %d (the hard limit)", before, target)
    return OpenFilesLimit(before, target, hard)
