"""The kernel wall around `exec`, `python_repl` and `/repl`: bubblewrap command lines.

A sandboxed call runs as ``bwrap <namespaces> <mounts> -- python -I -S _sandbox_limits.py
--limits ... -- <command>``:

* new user, pid, ipc, uts, cgroup and (unless the call was approved with network access)
  network namespaces; every capability dropped; no further user namespaces inside, so nothing
  can unmount a mask; its own session (no terminal injection); killed with its parent;
* ``/usr`` and the library/binary links read-only, a few harmless files of ``/etc`` (never
  ``shadow``, ``ssh`` or ``ssl/private``), the interpreter's ``bin``/``lib`` read-only,
  a fresh ``/proc``, a minimal ``/dev`` and a private ``/tmp`` and ``/dev/shm`` of a bounded
  size (`SandboxSpec.tmp_bytes`);
* for `python_repl` one scratch directory and nothing of the workspace; for `exec` the
  workspace read-only at its real path (`SandboxSpec.ro_binds`, the operator zone), its
  `SandboxSpec.masks` covered (``runtime/``, ``chats/``, ``.env*``, the key), the run's own
  chat folder mounted read-write over the ``chats/`` mask (`SandboxSpec.rw_binds`, by an open
  descriptor where bwrap takes one, so the folder bound is the one the daemon checked).

The order of the mounts is the security argument: the interpreter's own directories are
bound read-only *after* the workspace (a virtualenv inside the workspace stays read-only and
visible), every mask comes after them, the chat folder after the masks that contain it
(``chats/``) and before those inside it.

`BwrapDetector` answers once per instance whether this works here (`SandboxStatus`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

TOOLS_DIR = Path(__file__).resolve().parent
IN_SANDBOX_TOOLS = "/opt/soulflow-sandbox"
LIMITS_LAUNCHER = "_sandbox_limits.py"
SCRATCH = "/scratch"
SYSTEM_DIRS = ("/usr",)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PYTHON_PARTS = ("bin", "lib", "lib64", "pyvenv.cfg")
ETC_FILES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf",
    "/etc/host.conf", "/etc/localtime", "/etc/timezone", "/etc/os-release", "/etc/mime.types",
    "/etc/ssl/certs", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/gitconfig",
    "/etc/inputrc", "/etc/profile", "/etc/bash.bashrc", "/etc/magic", "/etc/protocols",
    "/etc/services",
)  # fmt: skip
ENABLE_HINT = (
    "install bubblewrap (`apt-get install bubblewrap`) and allow unprivileged user namespaces "
    "(`sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04+ also "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), then restart the daemon"
)
_PROBE_TIMEOUT_S = 10.0
PAGE = 4096
MASK_TMPFS_BYTES = PAGE  # a mask is an empty directory: it needs no room
DEFAULT_TMP_BYTES = 16 * 1024 * 1024
TMPFS_MOUNTS = (Path("/tmp"), Path("/dev/shm"))  # the sandbox's own, sized tmpfs mounts


class SandboxMode(StrEnum):
    """Which wall code runs behind: the kernel's (bubblewrap) or none (every call approved)."""

    BUBBLEWRAP = "bubblewrap"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """The mode, and a sentence for people: the version in use, or why it is unavailable."""

    mode: SandboxMode
    detail: str

    @property
    def available(self) -> bool:
        return self.mode is SandboxMode.BUBBLEWRAP

    def as_dict(self) -> dict[str, str]:
        return {"mode": self.mode.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-call resource limits, applied inside the sandbox (``max_pids`` also as a cgroup)."""

    cpu_s: int
    memory_mb: int
    max_pids: int
    file_size: int  # bytes (RLIMIT_FSIZE: the largest file a process may write)
    open_files: int

    def rlimits_json(self) -> str:
        """The launcher's ``--limits`` argument (bytes for sizes, seconds for CPU)."""
        return json.dumps({
            "cpu": self.cpu_s, "as": self.memory_mb * 1024 * 1024, "nproc": self.max_pids,
            "fsize": self.file_size, "nofile": self.open_files, "core": 0,
        })  # fmt: skip


_PROBE_LIMITS = Limits(cpu_s=5, memory_mb=256, max_pids=16, file_size=1024 * 1024,
                       open_files=64)


@dataclass(frozen=True, slots=True)
class RwBind:
    """A directory mounted read-write at ``path``; ``fd``, when set, is an open descriptor
    of it: bwrap then binds what the descriptor names, not whatever the path leads to by
    the time it gets there."""

    path: Path
    fd: int | None = None


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What one call may see. Paths are host paths, bound at the same path inside, except
    ``scratch`` which appears as ``/scratch``."""

    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    ro_binds: tuple[Path, ...] = ()
    rw_binds: tuple[RwBind, ...] = ()
    scratch: Path | None = None
    masks: tuple[Path, ...] = ()
    network: bool = False
    tmp_bytes: int = DEFAULT_TMP_BYTES  # size of the private /tmp and of /dev/shm
    # the command gets bwrap's own environment (which the caller sets whole) instead of
    # ``env`` on bwrap's command line: how values that must not show in ``ps`` (an MCP
    # server's secrets) get in; ``env`` must then be empty
    env_from_parent: bool = False

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """Descriptors bwrap must inherit (it closes them before the command starts)."""
        return tuple(b.fd for b in self.rw_binds if b.fd is not None)


@dataclass(frozen=True, slots=True)
class BwrapFeatures:
    """Options of the installed bwrap we use only when it has them."""

    path: str
    version: str
    disable_userns: bool
    cgroup_try: bool
    tmpfs_size: bool = False  # --size (0.7+; refused by a setuid bwrap)
    bind_fd: bool = False  # --bind-fd


def python_roots() -> list[Path]:
    """Directories the interpreter needs (venv and base installation), outside ``/usr``."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    candidates.add(str(Path(sys.executable).resolve().parent.parent))
    roots: list[Path] = []
    for raw in sorted(candidates):
        path = Path(raw).resolve()
        if path.is_dir() and not any(path.is_relative_to(d) for d in SYSTEM_DIRS):
            roots.append(path)
    return [r for r in roots if not any(r != o and r.is_relative_to(o) for o in roots)]


def python_paths() -> list[Path]:
    """What of each Python root is mounted: only the interpreter's own parts, so a prefix
    such as a home directory (``--prefix=$HOME`` builds) does not expose everything in it."""
    return [root / part for root in python_roots() for part in PYTHON_PARTS
            if (root / part).exists()]


def limited(inner: list[str], limits: Limits) -> list[str]:
    """``inner`` behind the in-sandbox limits launcher."""
    launcher = f"{IN_SANDBOX_TOOLS}/{LIMITS_LAUNCHER}"
    return [sys.executable, "-I", "-S", launcher, "--limits", limits.rlimits_json(), "--", *inner]


def bwrap_argv(features: BwrapFeatures, spec: SandboxSpec, inner: list[str], *,
               info_fd: int | None = None) -> list[str]:
    """The full ``bwrap`` command line for ``inner`` (already wrapped by `limited`);
    ``info_fd``: where bwrap writes the pid of the sandbox's first process."""
    argv = [features.path, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if features.cgroup_try:
        argv.append("--unshare-cgroup-try")
    if not spec.network:
        argv.append("--unshare-net")
    if features.disable_userns:
        argv.append("--disable-userns")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += _system_mounts(features, spec.tmp_bytes)
    argv += ["--ro-bind", str(TOOLS_DIR), IN_SANDBOX_TOOLS]
    if spec.scratch is not None:
        argv += ["--bind", str(spec.scratch), SCRATCH]
    for path in spec.ro_binds:
        argv += ["--ro-bind", str(path), str(path)]
    for path in python_paths():  # after the workspace: a venv inside it stays read-only
        argv += ["--ro-bind", str(path), str(path)]
    visible = _visible_roots(spec)
    masks = [m for m in spec.masks if any(m.is_relative_to(root) for root in visible)]
    inner_masks = [m for m in masks if any(m.is_relative_to(b.path) for b in spec.rw_binds)]
    for mask in masks:
        if mask not in inner_masks:
            argv += _mask(features, mask)
    for bind in spec.rw_binds:
        if bind.fd is not None and features.bind_fd:
            argv += ["--bind-fd", str(bind.fd), str(bind.path)]
        else:
            argv += ["--bind", str(bind.path), str(bind.path)]
    for mask in inner_masks:
        argv += _mask(features, mask)
    argv += ["--chdir", spec.cwd]
    if spec.env_from_parent:
        if spec.env:
            raise ValueError("a sandbox spec takes its environment from the parent or "
                             "from env, not both")
    else:
        argv.append("--clearenv")
    for name, value in spec.env.items():
        argv += ["--setenv", name, value]
    return [*argv, "--", *inner]


def _mask(features: BwrapFeatures, mask: Path) -> list[str]:
    """An empty, tiny tmpfs over a directory; ``/dev/null`` over anything else."""
    if mask.is_dir():
        return [*_sized(features, MASK_TMPFS_BYTES), "--tmpfs", str(mask)]
    return ["--ro-bind", "/dev/null", str(mask)]


def tmpfs_size(size: int) -> int:
    """``size`` as a tmpfs takes it: whole pages, and never 0 (which means unbounded)."""
    return max(PAGE, -(-size // PAGE) * PAGE)


def _sized(features: BwrapFeatures, size: int) -> list[str]:
    """``--size`` for the next tmpfs, where bwrap has it."""
    if not features.tmpfs_size:
        return []
    return ["--size", str(tmpfs_size(size))]


def tmpfs_skeleton(spec: SandboxSpec) -> int:
    """How many entries bwrap itself makes in the private ``/tmp`` and ``/dev/shm``: the
    directories leading to a mount point that lies there (a workspace under ``/tmp``, say),
    so that what the command makes there can be counted apart from them."""
    destinations = [*spec.ro_binds, *python_paths(), *(b.path for b in spec.rw_binds)]
    made: set[Path] = set()
    for destination in destinations:
        for tmpfs in TMPFS_MOUNTS:
            if not destination.is_relative_to(tmpfs) or destination == tmpfs:
                continue
            chain = [destination, *destination.parents]
            for path in chain[:chain.index(tmpfs)]:
                if not any(path != other and path.is_relative_to(other)
                           for other in destinations):
                    made.add(path)
    return len(made)


def _visible_roots(spec: SandboxSpec) -> list[Path]:
    """Host paths that appear at the same path inside (where a mask would be needed)."""
    roots = [Path(d) for d in SYSTEM_DIRS] + python_paths() + list(spec.ro_binds)
    roots += [b.path for b in spec.rw_binds]
    return roots + [Path(name) for name in ETC_FILES]


def _system_mounts(features: BwrapFeatures, tmp_bytes: int) -> list[str]:
    # The private /tmp comes first: binds listed after it land on top of it, so an interpreter
    # or venv that lives under /tmp (a CI checkout, say) stays visible inside.
    args: list[str] = ["--proc", "/proc", "--dev", "/dev"]
    for tmpfs in TMPFS_MOUNTS:
        args += [*_sized(features, tmp_bytes), "--tmpfs", str(tmpfs)]
    for directory in SYSTEM_DIRS:
        args += ["--ro-bind", directory, directory]
    for link in SYSTEM_LINKS:
        path = Path(link)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), link]
        elif path.is_dir():
            args += ["--ro-bind", link, link]
    for name in ETC_FILES:
        if Path(name).exists():
            args += ["--ro-bind", name, name]
    return args


class BwrapDetector:
    """Finds ``bwrap`` and proves it works by running ``true`` inside once; thread-safe, cached
    for the life of this object (the daemon holds one)."""

    def __init__(self, bwrap: str | None = None) -> None:
        self._bwrap = bwrap
        self._lock = threading.Lock()
        self._result: tuple[SandboxStatus, BwrapFeatures | None] | None = None

    def status(self) -> SandboxStatus:
        return self._detect()[0]

    def features(self) -> BwrapFeatures | None:
        """Set only when the mode is `SandboxMode.BUBBLEWRAP`."""
        return self._detect()[1]

    def _detect(self) -> tuple[SandboxStatus, BwrapFeatures | None]:
        with self._lock:
            if self._result is None:
                self._result = self._probe()
                log.info("code sandbox: %s (%s)", self._result[0].mode, self._result[0].detail)
            return self._result

    def _probe(self) -> tuple[SandboxStatus, BwrapFeatures | None]:
        path = self._bwrap or shutil.which("bwrap")
        if path is None:
            return _unavailable(f"bubblewrap (bwrap) is not installed; {ENABLE_HINT}"), None
        try:
            help_text = _run([path, "--help"]).stdout
            version = _run([path, "--version"]).stdout.strip() or "bubblewrap"
        except (OSError, subprocess.SubprocessError) as exc:
            return _unavailable(f"{path} does not run ({exc}); {ENABLE_HINT}"), None
        features = BwrapFeatures(path, version, "--disable-userns" in help_text,
                                 "--unshare-cgroup-try" in help_text,
                                 tmpfs_size="--size" in help_text and not _setuid(path),
                                 bind_fd="--bind-fd" in help_text)
        with tempfile.TemporaryDirectory(prefix="soulflow-probe-") as scratch:
            spec = SandboxSpec(cwd=SCRATCH, scratch=Path(scratch), env={"PATH": "/usr/bin:/bin"})
            try:
                # through the limits launcher, so the interpreter must be visible inside too
                probe = _run(bwrap_argv(features, spec, limited(["/bin/true"], _PROBE_LIMITS)))
            except (OSError, subprocess.SubprocessError) as exc:
                return _unavailable(f"bwrap could not start ({exc}); {ENABLE_HINT}"), None
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
            return _unavailable(f"bwrap fails here ({why}); {ENABLE_HINT}"), None
        return SandboxStatus(SandboxMode.BUBBLEWRAP, version), features


def _setuid(path: str) -> bool:
    """A setuid bwrap refuses ``--size`` (it would let users size host memory)."""
    try:
        return bool(os.stat(path).st_mode & stat.S_ISUID)
    except OSError:
        return False


def _unavailable(detail: str) -> SandboxStatus:
    return SandboxStatus(SandboxMode.UNAVAILABLE, detail)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S,
                          stdin=subprocess.DEVNULL, check=False)
