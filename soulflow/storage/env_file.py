"""Reading ``<workspace>/.env`` only when nothing but its owner can have written it.

``.env`` decides what the daemon runs (``LOCAL_MODEL_COMMAND``, provider URLs, tokens), and
the workspace is also where tools write. A ``.env`` that a tool could have created or changed
would let a prompt-injected ``exec`` choose the command the daemon runs, unsandboxed, on the
next start. So the file is read only when it is the operator's own:

* opened beneath the workspace without following a link (`Beneath`): a link could point at
  a file a tool wrote anywhere;
* a regular file (a FIFO would hang the start, a directory is a mistake);
* owned by the daemon's user: a file another user (or a sandbox running as one) created is
  not the operator's configuration;
* not writable by group or others: anyone else who can write it could change the settings;
* one link (``st_nlink == 1``): a second name elsewhere, maybe in a chat's folder, would let
  whoever can write there change ``.env`` through it.

Every check is made on the descriptor that is then read, so swapping the file between check
and read gains nothing. A refusal is an `UnsafeEnvFile` whose ``str()`` is one sentence:
what is wrong and the command that fixes it (the daemon prints it and exits; ``soulflow
doctor`` shows the same check).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import stat
from pathlib import Path

from soulflow.storage.beneath import Beneath, RefusedPath
from soulflow.storage.errors import StorageError

__all__ = ["ENV_FILE_NAME", "UnsafeEnvFile", "read_env_text"]

ENV_FILE_NAME = ".env"


class UnsafeEnvFile(StorageError):
    """``.env`` exists but is not safe to read; ``problem`` and ``fix`` are the two halves of
    the one sentence ``str()`` gives."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


def read_env_text(workspace: Path) -> str | None:
    """The text of ``<workspace>/.env``, None when there is none; `UnsafeEnvFile` when it
    exists but a tool (or another user) could have written it."""
    where = Beneath(workspace)
    path = where.root / ENV_FILE_NAME
    try:
        fd, st = where.open_regular(ENV_FILE_NAME)
    except FileNotFoundError:
        return None
    except RefusedPath:
        raise _not_regular(where, path) from None
    with os.fdopen(fd, "rb") as handle:
        _check_owner_and_links(path, st)
        return handle.read().decode("utf-8", errors="replace")


def _not_regular(where: Beneath, path: Path) -> UnsafeEnvFile:
    st = None
    with contextlib.suppress(OSError):
        st = where.stat(ENV_FILE_NAME)
    quoted = shlex.quote(str(path))
    if st is not None and stat.S_ISLNK(st.st_mode):
        return UnsafeEnvFile(
            f"{path} is a symbolic link, and the daemon reads .env only as a regular file in "
            "the workspace (a link could point at a file a tool wrote)",
            "replace the link with the file itself: "
            f"cp --remove-destination \"$(readlink -f {quoted})\" {quoted}")
    return UnsafeEnvFile(f"{path} is not a regular file",
                         "replace it with a regular file holding the settings (or remove it)")


def _check_owner_and_links(path: Path, st: os.stat_result) -> None:
    quoted = shlex.quote(str(path))
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafeEnvFile(
            f"{path} belongs to {_user(st.st_uid)}, not to the daemon's user {_user(uid)}, "
            "so it may not be the operator's configuration",
            f"check its contents, then run: chown {_name(uid)} {quoted}")
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeEnvFile(
            f"{path} has mode {mode:o}: other users could change the settings the daemon "
            "runs with", f"check its contents, then run: chmod go-w {quoted}")
    if st.st_nlink != 1:
        raise UnsafeEnvFile(
            f"{path} has {st.st_nlink} hard links, so it can be changed through another "
            "name (perhaps one a tool can write)",
            f"check its contents, then give it a copy of its own: "
            f"cp -p {quoted} {quoted}.new && mv {quoted}.new {quoted}")


def _user(uid: int) -> str:
    name = _name(uid)
    return f"uid {uid}" if name == str(uid) else f"{name} (uid {uid})"


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)

