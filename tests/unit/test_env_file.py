"""`.env` is read only when nothing but the daemon's user can have written it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soulflow.config import ConfigError, read_env_file
from soulflow.storage.env_file import UnsafeEnvFile, read_env_text


def test_the_operators_own_env_is_read(tmp_path: Path) -> None:
    assert read_env_file(tmp_path) == {}  # none: settings come from the environment
    env = tmp_path / ".env"
    env.write_text('LOG_LEVEL=debug\nNAME="a b"\n')
    for mode in (0o644, 0o600, 0o400):
        env.chmod(mode)
        assert read_env_file(tmp_path) == {"LOG_LEVEL": "debug", "NAME": "a b"}


def test_a_link_is_refused_even_to_a_good_file(tmp_path: Path) -> None:
    real = tmp_path / "settings.env"
    real.write_text("LOG_LEVEL=debug\n")
    (tmp_path / ".env").symlink_to(real)
    with pytest.raises(UnsafeEnvFile) as caught:
        read_env_text(tmp_path)
    assert "is a symbolic link" in caught.value.problem
    assert caught.value.fix.startswith("replace the link with the file itself: cp ")
    (tmp_path / ".env").unlink()
    (tmp_path / ".env").symlink_to(tmp_path / "missing")  # dangling: still a link
    with pytest.raises(ConfigError, match="is a symbolic link"):
        read_env_file(tmp_path)


@pytest.mark.parametrize("make", ["fifo", "dir"])
def test_anything_but_a_regular_file_is_refused(tmp_path: Path, make: str) -> None:
    env = tmp_path / ".env"
    os.mkfifo(env) if make == "fifo" else env.mkdir()
    with pytest.raises(ConfigError, match=r"\.env is not a regular file; replace it"):
        read_env_file(tmp_path)  # a FIFO does not block the start either


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666, 0o620])
def test_group_or_world_writable_is_refused(tmp_path: Path, mode: int) -> None:
    env = tmp_path / ".env"
    env.write_text("LOG_LEVEL=debug\n")
    env.chmod(mode)
    with pytest.raises(ConfigError) as caught:
        read_env_file(tmp_path)
    assert str(caught.value) == (
        f"{env} has mode {mode:o}: other users could change the settings the daemon runs "
        f"with; check its contents, then run: chmod go-w {env}")


def test_a_second_hard_link_is_refused(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("LOG_LEVEL=debug\n")
    (tmp_path / "chats").mkdir()
    os.link(env, tmp_path / "chats" / "innocent.txt")
    with pytest.raises(ConfigError, match=r"has 2 hard links.*cp -p .*\.env\.new && mv "):
        read_env_file(tmp_path)


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    env = tmp_path / ".env"
    env.write_text("LOG_LEVEL=debug\n")
    os.chown(env, 4321, 4321)
    with pytest.raises(ConfigError, match=r"belongs to uid 4321, not to the daemon's user "
                                          r".*then run: chown root "):
        read_env_file(tmp_path)
