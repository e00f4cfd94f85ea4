"""Launcher that limits itself and then becomes the real command; stdlib only, loaded by path.

Usage: ``python -I -S _sandbox_limits.py [--join CGROUP_PROCS] [--limits JSON] -- ARGV...``

* ``--join`` (used *outside* the sandbox, before ``bwrap``): move this process into a pids
  cgroup so that everything it starts is counted there. ``RLIMIT_NPROC`` does not bind root,
  so when the daemon runs as root the cgroup is the only thing that stops a fork bomb.
* ``--limits`` (used *inside* the sandbox): set rlimits. They must be set after ``bwrap`` made
  the user namespace: since Linux 5.14 ``RLIMIT_NPROC`` is counted per user namespace, but the
  limit a namespace is created under also caps the creator's whole user, so a small limit set
  before ``bwrap`` would count every process the daemon's user owns.

Then ``execv``: no Python is left between the limits and the command.
"""

from __future__ import annotations

import json
import os
import resource
import sys

_RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def _fail(message: str) -> None:
    sys.stderr.write(f"sandbox launcher: {message}\n")
    sys.stderr.flush()
    os._exit(126)


def _join(procs_file: str) -> None:
    fd = os.open(procs_file, os.O_WRONLY)
    try:
        os.write(fd, b"0")  # "0" moves the writing process
    finally:
        os.close(fd)


def _limit(spec: str) -> None:
    for name, value in json.loads(spec).items():
        which = _RLIMITS[name]
        hard = resource.getrlimit(which)[1]
        # never raise a hard limit (not allowed) and keep the CPU hard limit one second above
        # the soft one, so SIGXCPU arrives before SIGKILL
        soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
        top = value + 1 if name == "cpu" else value
        new_hard = top if hard == resource.RLIM_INFINITY else min(top, hard)
        resource.setrlimit(which, (soft, new_hard))


def main(argv: list[str]) -> None:
    if "--" not in argv:
        _fail("missing -- before the command")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    if not command or len(options) % 2:
        _fail("bad arguments")
    try:
        for flag, value in zip(options[::2], options[1::2], strict=True):
            if flag == "--join":
                _join(value)
            elif flag == "--limits":
                _limit(value)
            else:
                _fail(f"unknown option {flag}")
        os.execv(command[0], command)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"{command[0]}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
