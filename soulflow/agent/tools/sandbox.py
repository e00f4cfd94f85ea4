"""`CodeSandbox`: the one object that runs untrusted commands behind the kernel wall.

The daemon holds one (``Runtime.sandbox``) and hands it to `exec`, `python_repl` and `/repl`:
it knows whether bubblewrap works here (`status`, probed once), builds what each kind of
call may see (`exec_spec`, `python_spec`) and runs a command (`run`) with rlimits inside, a
pids cgroup around it where the host has one, its output captured through `OutputPipe`s, and
a wall-clock limit after which the whole sandbox (its pid namespace) is killed.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.agent.tools.bwrap import (
    LIMITS_LAUNCHER,
    SCRATCH,
    TOOLS_DIR,
    BwrapDetector,
    Limits,
    SandboxSpec,
    SandboxStatus,
    bwrap_argv,
    limited,
)
from soulflow.agent.tools.pids_cgroup import PidsCgroups
from soulflow.agent.tools.process import OutputPipe, kill_process_group, wait_or_kill
from soulflow.agent.tools.sandbox_masks import masked_paths, shared_runtime_paths
from soulflow.security.protected import ChatScope

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CGROUP_SPARE_PIDS = 4  # bwrap itself, its pid-namespace init and the launcher


class SandboxUnavailable(RuntimeError):
    """`CodeSandbox.run` was called where bubblewrap does not work (check `status` first)."""


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """How a sandboxed command ended; ``returncode`` is None if it had to be killed."""

    returncode: int | None
    timed_out: bool


class CodeSandbox:
    """Detection, per-call specs and the run itself; no state beyond the cached probe."""

    def __init__(self, settings: Settings | None = None, *,
                 detector: BwrapDetector | None = None, cgroups: PidsCgroups | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        """``settings`` say where the vault key is (``SOULFLOW_MASTER_KEY_FILE``), so `exec`
        masks it there; ``environ`` is only read for ``LANG``."""
        self.settings = settings
        self.detector = detector or BwrapDetector()
        self.cgroups = cgroups or PidsCgroups()
        self._environ = environ

    def status(self) -> SandboxStatus:
        """Probed on first use (one ``bwrap ... true``), then cached."""
        return self.detector.status()

    async def ready(self) -> SandboxStatus:
        """`status` without blocking the event loop on the first probe."""
        return await asyncio.to_thread(self.status)

    @staticmethod
    def unconfined_reason() -> str:
        """The approval reason for a call that would run with no OS sandbox."""
        return f"no OS sandbox: runs unconfined as {_user()}"

    def exec_spec(self, workspace: Path, *, network: bool = False,
                  chat: ChatScope | None = None, words: list[str] | None = None) -> SandboxSpec:
        """The workspace read-write at its real path, with the daemon's state and secrets
        hidden; the attachments of ``chat`` named in ``words`` are shown read-only.

        Blocking (it walks the workspace): call it from a worker thread.
        """
        real = workspace.resolve()
        shared = shared_runtime_paths(real, words or [], chat, self.settings) if chat else []
        environ = os.environ if self._environ is None else self._environ
        env = {"PATH": DEFAULT_PATH, "HOME": str(real), "PWD": str(real),
               "LANG": environ.get("LANG") or "C.UTF-8", "TERM": "dumb"}
        return SandboxSpec(cwd=str(real), env=env, rw_binds=(real,),
                           masks=tuple(masked_paths(real, self.settings)),
                           shared=tuple(shared), network=network)

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
    ) -> SandboxRun:
        """Run ``inner`` in the sandbox; ``stderr=None`` interleaves it into ``stdout``.

        Nothing it started survives this call: the group is killed at the end (or on
        cancellation), bwrap takes its pid namespace down with it, and the cgroup's
        remaining members are killed before the cgroup is removed.
        """
        features = self.detector.features()
        if features is None:
            raise SandboxUnavailable(self.status().detail)
        argv = bwrap_argv(features, spec, limited(inner, limits))
        group = self.cgroups.create(limits.max_pids + _CGROUP_SPARE_PIDS)
        if group is not None:
            launcher = str(TOOLS_DIR / LIMITS_LAUNCHER)
            argv = [sys.executable, "-I", "-S", launcher, "--join", str(group.procs_file),
                    "--", *argv]
        try:
            out_fd = await stdout.open()
            err_fd = await stderr.open() if stderr is not None else out_fd
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else
                    asyncio.subprocess.DEVNULL, stdout=out_fd, stderr=err_fd, env={},
                    start_new_session=True)
            finally:
                stdout.close_writer()
                if stderr is not None:
                    stderr.close_writer()
            try:
                if stdin is not None:
                    assert proc.stdin is not None
                    await _feed(proc.stdin, stdin)
                timed_out = await wait_or_kill(proc, timeout_s)
            finally:
                kill_process_group(proc.pid)  # also when cancelled while feeding stdin
        finally:
            if group is not None:
                await asyncio.to_thread(group.close)
            await stdout.finish()
            if stderr is not None:
                await stderr.finish()
        return SandboxRun(proc.returncode, timed_out)


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died early; its exit status tells the story
    finally:
        stdin.close()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
