"""A throw-away pids cgroup per sandboxed call: a process cap that also binds root.

``RLIMIT_NPROC`` is ignored for uid 0, so a daemon running as root could be fork-bombed
through ``exec`` or ``python_repl`` in the seconds before the wall-clock limit. When the host
offers a writable cgroup-v1 ``pids`` hierarchy (containers and VMs running as root usually
do), each call gets its own child cgroup with ``pids.max``; the sandbox launcher joins it
before ``bwrap`` starts, so every process of the call is counted, and at the end every
process still in it is killed before the cgroup is removed.

Where no such hierarchy is writable (a normal user on a systemd host, cgroup v2 without
delegation) `PidsCgroups.create` returns None and ``RLIMIT_NPROC`` - which does bind
non-root users, counted per user namespace - is the cap. A daemon running as **root** on such
a host has no per-call process cap at all: only the call's wall clock bounds its processes
(the pid namespace is torn down at the timeout). `PidsCgroups.cap` says which case holds, so
`soulflow status` and `soulflow doctor` can tell the operator (docs/security.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

_PREFIX = "soulflow-sandbox-"
_CLOSE_WITHIN_S = 10.0
_CLOSE_POLL_S = 0.01


class ProcessCap(StrEnum):
    """What bounds the number of processes of one sandboxed call."""

    CGROUP = "pids cgroup"  # a cgroup-v1 pids hierarchy: binds root too
    RLIMIT = "RLIMIT_NPROC"  # binds the non-root daemon's user, per user namespace
    NONE = "none"  # root without a pids cgroup: only the call's wall clock

    def sentence(self) -> str:
        """For people: what the cap is, and what to do when there is none."""
        if self is ProcessCap.CGROUP:
            return "a pids cgroup per call caps its processes"
        if self is ProcessCap.RLIMIT:
            return "RLIMIT_NPROC caps a call's processes"
        return ("no per-call process cap: the daemon runs as root and the host has no "
                "writable cgroup-v1 pids hierarchy (cgroup v2 only?), so only the call's "
                "timeout bounds its processes; run the daemon as an ordinary user (then "
                "RLIMIT_NPROC caps them)")


@dataclass(frozen=True, slots=True)
class PidsCgroup:
    """One call's cgroup: join it through ``procs_file``, `close` it when the call ends."""

    path: Path

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(line) for line in self.procs_file.read_text().split() if line]
        return []

    def close(self, within_s: float = _CLOSE_WITHIN_S) -> None:
        """Kill whatever is left in the cgroup, then remove it, retrying while they die.

        Blocking (it sleeps between tries): call it from a worker thread.
        """
        deadline = time.monotonic() + within_s
        while True:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY until the killed processes are reaped
                if time.monotonic() > deadline:
                    break
                time.sleep(_CLOSE_POLL_S)
        log.warning("could not remove sandbox cgroup %s; %d process(es) still in it",
                    self.path, len(self.pids()))


class PidsCgroups:
    """Finds a writable pids hierarchy once (per instance) and makes per-call cgroups in it."""

    def __init__(self, mounts_file: Path = Path("/proc/self/mounts"),
                 cgroup_file: Path = Path("/proc/self/cgroup")) -> None:
        self._mounts_file = mounts_file
        self._cgroup_file = cgroup_file
        self._parent: Path | None = None
        self._probed = False

    @property
    def parent(self) -> Path | None:
        """The directory per-call cgroups are made in, or None when there is none usable."""
        if not self._probed:
            self._probed = True
            self._parent = self._find_parent()
        return self._parent

    def cap(self) -> ProcessCap:
        """Which bound a call's processes get here (probes the hierarchy once)."""
        if self.parent is not None:
            return ProcessCap.CGROUP
        return ProcessCap.NONE if os.geteuid() == 0 else ProcessCap.RLIMIT

    def create(self, max_pids: int) -> PidsCgroup | None:
        """A fresh cgroup allowing ``max_pids`` processes, or None if the host has none."""
        parent = self.parent
        if parent is None:
            return None
        path = parent / f"{_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        try:
            path.mkdir()
        except OSError as exc:
            log.warning("cannot create a pids cgroup in %s: %s", parent, exc)
            return None
        group = PidsCgroup(path)
        try:
            (path / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            log.warning("cannot set pids.max in %s: %s", path, exc)
            group.close()
            return None
        return group

    def _find_parent(self) -> Path | None:
        mount = self._v1_pids_mount()
        if mount is None:
            return None
        own = self._own_v1_path()
        parent = mount / own.lstrip("/") if own else mount
        if not (parent / "pids.max").exists() and parent != mount:
            parent = mount
        if os.access(parent, os.W_OK):
            self._remove_leftovers(parent)
            return parent
        return None

    def _v1_pids_mount(self) -> Path | None:
        with contextlib.suppress(OSError):
            for line in self._mounts_file.read_text().splitlines():
                fields = line.split()
                if len(fields) >= 4 and fields[2] == "cgroup" and "pids" in fields[3].split(","):
                    return Path(fields[1])
        return None

    def _own_v1_path(self) -> str | None:
        with contextlib.suppress(OSError):
            for line in self._cgroup_file.read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if "pids" in controllers.split(","):
                    return path
        return None

    @staticmethod
    def _remove_leftovers(parent: Path) -> None:
        """Cgroups a crashed daemon of ours left behind (their pid no longer runs)."""
        for child in parent.glob(f"{_PREFIX}*"):
            owner = child.name[len(_PREFIX):].split("-", 1)[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                PidsCgroup(child).close()
