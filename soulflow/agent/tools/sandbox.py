"""`CodeSandbox`: the one object that runs untrusted commands behind the kernel wall.

The daemon holds one (``Runtime.sandbox``) and hands it to `exec`, `python_repl` and `/repl`:
it knows whether bubblewrap works here (`status`, probed once), builds what each kind of
call may see (`exec_spec`, `python_spec`) and runs a command (`run`) with rlimits inside, a
pids cgroup around it where the host has one, its output captured through `OutputPipe`s, and
a wall-clock limit after which the whole sandbox (its pid namespace) is killed. A `Monitor`
may watch the call from outside (`SandboxView`: the sandbox's root, its private /tmp) and
stop it early, as the disk-quota watcher does.

It also holds what outlives one call: the chat folders' disk quotas (`quotas`) and the cache
of the operator zone's mask scan (`sandbox_masks.MaskScanner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.agent.errors import AgentError
from soulflow.agent.tools.bwrap import (
    DEFAULT_TMP_BYTES,
    LIMITS_LAUNCHER,
    SCRATCH,
    TMPFS_MOUNTS,
    TOOLS_DIR,
    BwrapDetector,
    Limits,
    RwBind,
    SandboxSpec,
    SandboxStatus,
    bwrap_argv,
    limited,
)
from soulflow.agent.tools.pids_cgroup import PidsCgroups
from soulflow.agent.tools.process import (
    DRAIN_AFTER_KILL_S,
    OutputPipe,
    kill_process_group,
    wait_or_kill,
)
from soulflow.agent.tools.sandbox_masks import MaskScanner, masked_paths
from soulflow.security.quota import ZoneQuotas
from soulflow.security.zones import ChatZone
from soulflow.storage.tree_usage import Usage

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

log = logging.getLogger(__name__)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CGROUP_SPARE_PIDS = 4  # bwrap itself, its pid-namespace init and the launcher
_GONE_POLL_S = 0.01


class SandboxUnavailable(AgentError):
    """`CodeSandbox.run` was called where bubblewrap does not work (check `status` first)."""


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """How a sandboxed command ended; ``returncode`` is None if it had to be killed."""

    returncode: int | None
    timed_out: bool
    stopped: str | None = None  # why a `Monitor` stopped it, if one did


class SandboxView:
    """A running sandbox seen from outside: bwrap names its first process on an info
    descriptor (read without blocking, whenever asked), and that process's ``/proc/<pid>/
    root`` is the sandbox's file system once bwrap has finished building it."""

    def __init__(self, info_fd: int) -> None:
        self._fd: int | None = info_fd
        os.set_blocking(info_fd, False)
        self._text = b""
        self.pid: int | None = None
        self._host_root = _ident(os.stat("/"))

    def poll(self) -> int | None:
        """The sandbox's first pid, once bwrap has written it."""
        while self._fd is not None and self.pid is None:
            try:
                chunk = os.read(self._fd, 4096)
            except BlockingIOError:
                break
            if chunk:
                self._text += chunk
                continue
            self.close()
            with contextlib.suppress(ValueError, TypeError, KeyError):
                self.pid = int(json.loads(self._text)["child-pid"])
        return self.pid

    def tmpfs_usage(self, size: int | None, skeleton: int = 0) -> Usage:
        """What the sandbox's private ``/tmp`` and ``/dev/shm`` hold (bytes, entries), from
        their file systems' counters, less the ``skeleton`` entries bwrap made there for
        its mount points (`bwrap.tmpfs_skeleton`); zero until they exist. Only once the
        process's root is no longer the host's, and (``size`` given: bwrap sized them) only
        a file system of exactly that size, so a half-built sandbox never reports the
        host's /tmp."""
        pid = self.poll()
        if pid is None:
            return Usage()
        root = Path(f"/proc/{pid}/root")
        total = Usage()
        try:
            if _ident(os.stat(root)) == self._host_root:
                return total
            for mount in TMPFS_MOUNTS:
                found = os.statvfs(root / mount.relative_to("/"))
                if size is not None and found.f_blocks * found.f_frsize != size:
                    continue
                used = (found.f_blocks - found.f_bfree) * found.f_frsize
                total += Usage(used, found.f_files - found.f_ffree - 1)  # less its root
        except OSError:
            pass
        return Usage(total.bytes, max(0, total.files - skeleton))

    async def gone(self, within: float) -> None:
        """Wait (up to ``within`` s) until the sandbox's first process has exited: when it
        has, the kernel has killed every process of the pid namespace, so nothing writes
        any more."""
        pid = self.poll()
        if pid is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while _running(pid) and loop.time() < deadline:
            await asyncio.sleep(_GONE_POLL_S)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


Monitor = Callable[[SandboxView], Awaitable[str]]
"""Watches a running call; returning (a reason) stops it. Cancelled when the call ends."""


class CodeSandbox:
    """Detection, per-call specs and the run itself; besides the cached probe it holds the
    chat folders' `quotas` and the operator zone's mask-scan cache."""

    def __init__(self, settings: Settings | None = None, *,
                 detector: BwrapDetector | None = None, cgroups: PidsCgroups | None = None,
                 environ: Mapping[str, str] | None = None, quotas: ZoneQuotas | None = None,
                 scanner: MaskScanner | None = None) -> None:
        """``settings`` say where the vault key is (``SOULFLOW_MASTER_KEY_FILE``), so `exec`
        masks it there, and give the disk quotas (unless ``quotas`` is passed); ``environ``
        is only read for ``LANG``."""
        self.settings = settings
        self.detector = detector or BwrapDetector()
        self.cgroups = cgroups or PidsCgroups()
        self._environ = environ
        if quotas is None:
            quotas = ZoneQuotas.from_settings(settings) if settings else ZoneQuotas()
        self.quotas = quotas
        self.scanner = scanner or MaskScanner()
        self._zone_locks: dict[str, asyncio.Lock] = {}

    def zone_lock(self, zone: ChatZone) -> asyncio.Lock:
        """One exec call at a time per chat folder (a sub-agent shares its parent's): a
        call's snapshot, budget and undo assume nothing else writes there meanwhile."""
        return self._zone_locks.setdefault(zone.name, asyncio.Lock())

    def status(self) -> SandboxStatus:
        """Probed on first use (one ``bwrap ... true``), then cached."""
        return self.detector.status()

    def describe(self) -> dict[str, str]:
        """The status for people (`/api/state`, `soulflow status`): the mode, its detail and
        what caps a call's processes here (`ProcessCap`)."""
        return {**self.status().as_dict(), "process_cap": self.cgroups.cap().sentence()}

    async def ready(self) -> SandboxStatus:
        """`status` without blocking the event loop on the first probe."""
        return await asyncio.to_thread(self.status)

    def tmpfs_sized(self) -> bool:
        """Whether this bwrap bounds the private /tmp (``--size``)."""
        features = self.detector.features()
        return features is not None and features.tmpfs_size

    @staticmethod
    def unconfined_reason() -> str:
        """The approval reason for a call that would run with no OS sandbox."""
        return f"no OS sandbox: runs unconfined as {_user()}"

    def exec_spec(self, workspace: Path, *, zone: ChatZone, zone_fd: int | None = None,
                  network: bool = False, tmp_bytes: int = DEFAULT_TMP_BYTES,
                  ) -> SandboxSpec:
        """The workspace read-only at its real path (the operator zone), ``zone``'s folder
        read-write (bound through ``zone_fd`` when given), the daemon's state, the other
        chats' folders and the secrets hidden. cwd is the workspace root (paths as the file
        tools take them), ``HOME`` the chat's folder.

        Blocking (it checks the workspace for what to mask): call it from a worker thread.
        Raises `sandbox_masks.MaskScanRefused` when that check cannot be done whole.
        """
        real = workspace.resolve()
        home = real / zone.rel
        masks = masked_paths(real, self.settings, scanner=self.scanner)
        environ = os.environ if self._environ is None else self._environ
        env = {"PATH": DEFAULT_PATH, "HOME": str(home), "PWD": str(real),
               "LANG": environ.get("LANG") or "C.UTF-8", "TERM": "dumb"}
        return SandboxSpec(cwd=str(real), env=env, ro_binds=(real,),
                           rw_binds=(RwBind(home, zone_fd),), masks=tuple(masks),
                           network=network, tmp_bytes=tmp_bytes)

    @staticmethod
    def python_spec(scratch: Path) -> SandboxSpec:
        """Nothing of the workspace: a scratch directory, no network, an empty environment."""
        return SandboxSpec(cwd=SCRATCH, scratch=scratch, env={"HOME": SCRATCH})

    async def run(
        self,
        spec: SandboxSpec,
        inner: list[str],
        limits: Limits,
        timeout_s: float,
        stdout: OutputPipe,
        stderr: OutputPipe | None = None,
        stdin: bytes | None = None,
        monitor: Monitor | None = None,
    ) -> SandboxRun:
        """Run ``inner`` in the sandbox; ``stderr=None`` interleaves it into ``stdout``.

        Nothing it started survives this call: the group is killed at the end (or on
        cancellation, or when ``monitor`` returns), bwrap takes its pid namespace down with
        it, this call returns only once that namespace is gone, and the cgroup's remaining
        members are killed before the cgroup is removed.
        """
        features = self.detector.features()
        if features is None:
            raise SandboxUnavailable(self.status().detail)
        group = self.cgroups.create(limits.max_pids + _CGROUP_SPARE_PIDS)
        info_read, info_write = os.pipe()
        view = SandboxView(info_read)
        argv = bwrap_argv(features, spec, limited(inner, limits), info_fd=info_write)
        if group is not None:
            launcher = str(TOOLS_DIR / LIMITS_LAUNCHER)
            argv = [sys.executable, "-I", "-S", launcher, "--join", str(group.procs_file),
                    "--", *argv]
        watch: asyncio.Task[str] | None = None
        try:
            try:
                out_fd = await stdout.open()
                err_fd = await stderr.open() if stderr is not None else out_fd
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else
                    asyncio.subprocess.DEVNULL, stdout=out_fd, stderr=err_fd, env={},
                    start_new_session=True, pass_fds=(info_write, *spec.pass_fds))
            finally:
                os.close(info_write)  # bwrap holds its copy until it has written the pid
                stdout.close_writer()
                if stderr is not None:
                    stderr.close_writer()
            if monitor is not None:
                watch = asyncio.create_task(monitor(view))
            try:
                if stdin is not None:
                    assert proc.stdin is not None
                    await _feed(proc.stdin, stdin)
                timed_out = await wait_or_kill(proc, timeout_s, stop=watch)
            finally:
                kill_process_group(proc.pid)  # also when cancelled while feeding stdin
                await view.gone(DRAIN_AFTER_KILL_S)
        finally:
            stopped = await _finish(watch)
            view.close()
            if group is not None:
                await asyncio.to_thread(group.close)
            await stdout.finish()
            if stderr is not None:
                await stderr.finish()
        return SandboxRun(proc.returncode, timed_out, stopped)


async def _finish(watch: asyncio.Task[str] | None) -> str | None:
    """The monitor's reason if it stopped the call; otherwise cancel it and wait for it. A
    monitor that failed stopped the call too (it could not watch): its error is the reason."""
    if watch is None:
        return None
    if not watch.done():
        watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait([watch])
    if watch.cancelled():
        return None
    error = watch.exception()
    if error is not None:
        log.error("the sandbox monitor failed, so the call was stopped: %r", error)
        return f"the watcher of this call failed ({type(error).__name__}: {error})"
    return watch.result()


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died early; its exit status tells the story
    finally:
        stdin.close()


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie runs no code)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
