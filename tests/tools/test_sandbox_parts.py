"""The sandbox's parts on their own: the mask list, the limits launcher, the pids cgroup and
the process cap it gives even to root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soulflow.agent.tools import bwrap
from soulflow.agent.tools.bwrap import (
    LIMITS_LAUNCHER,
    TOOLS_DIR,
    BwrapFeatures,
    Limits,
    RwBind,
    SandboxSpec,
    bwrap_argv,
    tmpfs_skeleton,
)
from soulflow.agent.tools.pids_cgroup import PidsCgroups, ProcessCap
from soulflow.agent.tools.process import OutputPipe
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.sandbox_masks import MaskScanner, MaskScanRefused, masked_paths
from soulflow.config import load_settings
from tests.conftest import skip_platform_fact
from tests.tools.sandbox_support import processes_with, working_sandbox

LAUNCHER = str(TOOLS_DIR / LIMITS_LAUNCHER)


def test_masks_cover_runtime_env_files_and_a_key_kept_elsewhere(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "runtime" / "security").mkdir(parents=True)
    (ws / "runtime" / "security" / "master.key").write_bytes(b"k")
    (ws / ".env").write_text("A=1")
    (ws / ".ENV.production").write_text("A=2")
    (ws / "app" / "deep").mkdir(parents=True)
    (ws / "app" / "deep" / ".env.local").write_text("A=3")
    (ws / "app" / "deep" / "link.env").symlink_to(ws / ".env")  # not a .env* name itself
    (ws / "notes.txt").write_text("not secret")
    elsewhere = tmp_path / "keys" / "master.key"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"k")
    settings = load_settings(ws, environ={"SOULFLOW_MASTER_KEY_FILE": str(elsewhere)})
    real = ws.resolve()
    assert masked_paths(ws, settings) == [
        real / "runtime",  # directories first; the key inside it is covered by it
        elsewhere.resolve(),
        real / ".ENV.production",
        real / ".env",
        real / "app" / "deep" / ".env.local",
    ]


def test_masks_of_an_empty_workspace(tmp_path: Path) -> None:
    assert masked_paths(tmp_path) == []


def test_chats_and_runtime_are_masked_whole_in_any_letter_case(tmp_path: Path) -> None:
    (tmp_path / "chats" / "local-c1").mkdir(parents=True)
    (tmp_path / "chats" / "local-c1" / ".env").write_text("mine")  # the chat's own: not scanned
    (tmp_path / "Runtime").mkdir()
    real = tmp_path.resolve()
    assert masked_paths(tmp_path) == [real / "Runtime", real / "chats"]


class CountingScanner(MaskScanner):
    """Counts the directories it lists (the expensive part a cache must avoid)."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(limit)
        self.listed: list[str] = []
        outer = self

        def listing(path: str, rel: str, *args: object) -> object:
            outer.listed.append(rel)
            return MaskScanner._list(path, rel, *args)  # type: ignore[arg-type]

        self._list = listing  # type: ignore[method-assign]


def _tree(ws: Path) -> None:
    for rel in ("a/b/c", "a/d", ".venv/lib/site", ".git/objects/aa", "node_modules/x"):
        (ws / rel).mkdir(parents=True)
        (ws / rel / "file.txt").write_text("x")


def test_the_scan_is_cached_and_a_new_dotenv_anywhere_is_seen(tmp_path: Path) -> None:
    ws = tmp_path.resolve()
    _tree(ws)
    scanner = CountingScanner()
    assert scanner.findings(ws, set()) == []
    cold = len(scanner.listed)
    assert cold == 13  # the root and every directory, .venv/.git/node_modules included
    (ws / ".git" / "objects" / "aa" / ".env").write_text("planted")
    (ws / "node_modules" / "x" / ".ENV.test").mkdir()
    assert sorted(scanner.findings(ws, set())) == [ws / ".git/objects/aa/.env",
                                                   ws / "node_modules/x/.ENV.test"]
    (ws / "a" / "b" / "c").rename(ws / "a" / "c2")
    (ws / "a" / "c2" / ".env.local").write_text("x")
    assert ws / "a/c2/.env.local" in scanner.findings(ws, set())


def test_unchanged_directories_are_not_listed_again(tmp_path: Path) -> None:
    ws = tmp_path.resolve()
    _tree(ws)
    scanner = CountingScanner()
    scanner.findings(ws, set())
    old = time.time_ns() - 5 * 10**9  # make every directory look long settled
    for current, _dirs, _files in os.walk(ws):
        os.utime(current, ns=(old, old))  # (ctime moves, but before the listing below)
    scanner.listed.clear()
    scanner.findings(ws, set())  # lists each once more: their ctime just changed
    relisted = len(scanner.listed)
    scanner.listed.clear()
    scanner._caches[ws].dirs = {  # as if that listing happened long after the change
        rel: type(listed)(listed.ident, listed.listed_at_ns + 5 * 10**9, listed.entries,
                          listed.subdirs, listed.found)
        for rel, listed in scanner._caches[ws].dirs.items()}
    scanner.findings(ws, set())
    assert relisted == 13 and scanner.listed == []


def test_a_new_key_link_changes_the_answer(tmp_path: Path) -> None:
    ws = (tmp_path / "ws").resolve()
    _tree(ws)
    key = tmp_path / "key"
    key.write_bytes(b"k")
    st = key.stat()
    scanner = MaskScanner()
    assert scanner.findings(ws, {(st.st_dev, st.st_ino)}) == []
    (ws / "a" / "d" / "copy").hardlink_to(key)
    assert scanner.findings(ws, {(st.st_dev, st.st_ino)}) == [ws / "a/d/copy"]


def test_the_bound_counts_the_operator_zone_only(tmp_path: Path) -> None:
    ws = tmp_path.resolve()
    (ws / "chats" / "z").mkdir(parents=True)
    for i in range(30):
        (ws / "chats" / "z" / str(i)).touch()
    assert MaskScanner(limit=10).findings(ws, set()) == []
    for i in range(10):
        (ws / str(i)).touch()
    with pytest.raises(MaskScanRefused, match="more than 10 files and folders"):
        MaskScanner(limit=10).findings(ws, set())


def test_launcher_sets_limits_then_becomes_the_command() -> None:
    limits = json.dumps({"nofile": 37, "fsize": 4096, "cpu": 7, "core": 0})
    proc = subprocess.run(
        [sys.executable, "-I", "-S", LAUNCHER, "--limits", limits, "--", "/bin/sh", "-c",
         "ulimit -n; ulimit -t; ulimit -f; echo $$"],
        capture_output=True, text=True, timeout=30, check=False)
    lines = proc.stdout.split()
    assert proc.returncode == 0, proc.stderr
    assert lines[:3] == ["37", "7", "8"]  # ulimit -f counts 512-byte blocks


@pytest.mark.parametrize("argv", [["--limits", "{}"], ["--bogus", "x", "--", "/bin/true"],
                                  ["--", "/no/such/program"]])
def test_launcher_refuses_bad_arguments(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-I", "-S", LAUNCHER, *argv], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 126 and proc.stderr.startswith("sandbox launcher:")


def _cgroups_or_skip() -> PidsCgroups:
    cgroups = PidsCgroups()
    if cgroups.parent is None:
        skip_platform_fact("no-cgroup-v1-pids", "no writable cgroup-v1 pids hierarchy here; "
                           "the case without one is test_without_a_pids_cgroup_root_...")
    return cgroups


def test_a_cgroup_is_made_joined_and_removed() -> None:
    group = _cgroups_or_skip().create(5)
    assert group is not None
    assert (group.path / "pids.max").read_text().strip() == "5"
    proc = subprocess.Popen([sys.executable, "-I", "-S", LAUNCHER, "--join",
                             str(group.procs_file), "--", "/bin/sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while proc.pid not in group.pids():
            assert time.monotonic() < deadline, "the launcher never joined the cgroup"
            time.sleep(0.01)
        group.close()  # kills what is left, then removes the directory
        assert proc.wait(timeout=10) == -9
        assert not group.path.exists()
    finally:
        proc.kill()
        proc.wait()


def test_leftover_cgroups_of_a_dead_daemon_are_removed() -> None:
    cgroups = _cgroups_or_skip()
    assert cgroups.parent is not None
    stale = cgroups.parent / "soulflow-sandbox-999999999-deadbeef"
    stale.mkdir()
    assert PidsCgroups().parent == cgroups.parent  # a new daemon's first look cleans up
    assert not stale.exists()


def test_no_hierarchy_means_no_cgroup(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert PidsCgroups(mounts_file=mounts).create(10) is None


async def test_the_process_cap_holds_even_for_root(tmp_path: Path) -> None:
    sandbox = working_sandbox()
    if sandbox.cgroups.cap() is ProcessCap.NONE:
        skip_platform_fact("no-cgroup-v1-pids", "root without a pids cgroup has no cap; that "
                           "case is test_without_a_pids_cgroup_root_...")
    out = OutputPipe(64 * 1024)
    limits = Limits(cpu_s=5, memory_mb=1024, max_pids=8, file_size=1024 * 1024, open_files=64)
    command = "for i in $(seq 40); do sleep 5 & done 2>&1; echo started; kill $(jobs -p)"
    run = await sandbox.run(CodeSandbox.python_spec(tmp_path), ["/bin/sh", "-c", command],
                            limits, 20, out)
    assert not run.timed_out
    assert "fork" in out.text().lower() or "resource temporarily unavailable" in out.text()


async def test_without_a_pids_cgroup_root_is_bounded_by_the_wall_clock_and_told_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented limit (docs/security.md, Code sandbox): a daemon running as root on a
    host without a cgroup-v1 pids hierarchy (cgroup v2 only) has no per-call process cap.
    Status and doctor say so, and the call's timeout still ends every process it started."""
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n")
    cgroups = PidsCgroups(mounts_file=mounts)
    monkeypatch.setattr("soulflow.agent.tools.pids_cgroup.os.geteuid", lambda: 0)
    assert cgroups.cap() is ProcessCap.NONE
    sandbox = CodeSandbox(cgroups=cgroups)
    if not sandbox.status().available:
        working_sandbox()  # skips saying why (a failure under CI)
    assert "only the call's timeout bounds its processes" in sandbox.describe()["process_cap"]
    marker = f"31.{os.getpid()}{int(time.time() * 1000) % 100000}"
    command = f"for i in $(seq 20); do sleep {marker} & done; sleep {marker}"
    limits = Limits(cpu_s=5, memory_mb=1024, max_pids=8, file_size=1024 * 1024, open_files=64)
    out = OutputPipe(64 * 1024)
    (tmp_path / "scratch").mkdir()
    run = await sandbox.run(CodeSandbox.python_spec(tmp_path / "scratch"),
                            ["/bin/sh", "-c", command], limits, 2, out)
    assert run.timed_out
    assert processes_with(marker) == []  # the pid namespace went down with the timeout


def _features(**options: bool) -> BwrapFeatures:
    return BwrapFeatures("/usr/bin/bwrap", "bubblewrap 0.8.0", disable_userns=True,
                         cgroup_try=True, **options)


def test_the_mount_order_keeps_the_operator_zone_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workspace read-only, then the interpreter's directories (a venv inside stays
    read-only), the masks that contain the chat folder, the folder itself, and last the
    masks inside it."""
    ws = tmp_path / "ws"
    venv = ws / ".venv"
    (venv / "lib").mkdir(parents=True)
    (ws / "chats" / "local-c1").mkdir(parents=True)
    (ws / "runtime").mkdir()
    key = ws / "chats" / "local-c1" / "key"
    key.write_text("k")
    monkeypatch.setattr(bwrap, "python_roots", lambda: [venv])
    home = ws / "chats" / "local-c1"
    spec = SandboxSpec(cwd=str(ws), ro_binds=(ws,), rw_binds=(RwBind(home, 7),),
                       masks=(ws / "chats", ws / "runtime", key), tmp_bytes=5000)
    argv = bwrap_argv(_features(tmpfs_size=True, bind_fd=True), spec, ["true"])
    joined = " ".join(argv)
    order = [f"--ro-bind {ws} {ws}", f"--ro-bind {venv / 'lib'} {venv / 'lib'}",
             f"--size 4096 --tmpfs {ws / 'chats'}", f"--bind-fd 7 {home}",
             f"--ro-bind /dev/null {key}"]
    positions = [joined.index(part) for part in order]
    assert positions == sorted(positions), joined
    assert "--size 8192 --tmpfs /tmp" in joined and "--size 8192 --tmpfs /dev/shm" in joined
    assert spec.pass_fds == (7,)


def test_an_older_bwrap_gets_no_size_and_a_path_bind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    spec = SandboxSpec(cwd="/", rw_binds=(RwBind(home, 7),))
    argv = bwrap_argv(_features(), spec, ["true"])
    assert "--size" not in argv and "--bind-fd" not in argv
    assert f"--bind {home} {home}" in " ".join(argv)


def test_the_tmpfs_skeleton_counts_the_folders_bwrap_makes_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "python_roots", lambda: [])
    ws = Path("/tmp/pytest-x/ws")
    spec = SandboxSpec(cwd=str(ws), ro_binds=(ws,), rw_binds=(RwBind(ws / "chats" / "z"),))
    assert tmpfs_skeleton(spec) == 2  # /tmp/pytest-x and /tmp/pytest-x/ws
    assert tmpfs_skeleton(SandboxSpec(cwd="/", ro_binds=(Path("/srv/ws"),))) == 0
