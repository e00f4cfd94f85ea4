"""Opening the configured backend: a Redis that cannot be used is one clear sentence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soulflow.backends.base import BackendKind, BackendUnavailable
from soulflow.backends.file.backend import FileBackend
from soulflow.backends.redis.backend import RedisBackend, shown_url
from soulflow.backends.wiring import BackendConfig, default_node_id, open_backend
from soulflow.config import ConfigError, load_settings
from tests.backends.redis_server import RedisServer, free_port


async def test_unreachable_redis_is_one_sentence_without_the_password(tmp_path: Path) -> None:
    url = f"redis://bot:hunter2@127.0.0.1:{free_port()}/0"
    config = BackendConfig(kind=BackendKind.REDIS, redis_url=url, node_id="n1")
    with pytest.raises(BackendUnavailable) as caught:
        await open_backend(config, tmp_path)
    message = str(caught.value)
    assert "unreachable" in message and "REDIS_URL" in message
    assert "hunter2" not in message and "bot:***@127.0.0.1" in message
    assert "\n" not in message
    assert isinstance(caught.value, ConfigError)  # `soulflow run` prints it and exits 1


async def test_redis_backend_without_a_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="needs REDIS_URL"):
        await open_backend(BackendConfig(kind=BackendKind.REDIS), tmp_path)


def test_settings_validate_the_backend_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="REDIS_URL must be a redis://"):
        load_settings(tmp_path, {"REDIS_URL": "http://localhost:6379"})
    with pytest.raises(ConfigError, match="SOULFLOW_BACKEND must be one of file, redis"):
        load_settings(tmp_path, {"SOULFLOW_BACKEND": "etcd"})
    with pytest.raises(ConfigError, match="SOULFLOW_NODE_ID"):
        load_settings(tmp_path, {"SOULFLOW_NODE_ID": "a|b"})
    settings = load_settings(tmp_path, {"SOULFLOW_BACKEND": "redis",
                                        "REDIS_URL": "rediss://cache.internal:6380/2"})
    config = BackendConfig.from_settings(settings)
    assert config.kind is BackendKind.REDIS and config.redis_url.startswith("rediss://")
    # stable for a workspace (a restart keeps it), apart for another one
    assert config.node_id == default_node_id(settings.workspace) != default_node_id(
        tmp_path / "elsewhere")
    assert str(os.getpid()) not in config.node_id.rsplit("-", 1)[1]
    assert (config.partitions, config.lease_ttl_s) == (16, 6.0)


async def test_open_backend_builds_what_the_settings_name(tmp_path: Path,
                                                          redis_server: RedisServer) -> None:
    file_backend = await open_backend(BackendConfig(), tmp_path)
    assert isinstance(file_backend, FileBackend)
    await file_backend.stop()
    config = BackendConfig(kind=BackendKind.REDIS, redis_url=redis_server.url, node_id="n1",
                           key_prefix="open-test:", partitions=2)
    redis_backend = await open_backend(config, tmp_path)
    try:
        assert isinstance(redis_backend, RedisBackend)
        assert redis_backend.partitions.held() == [0, 1]
    finally:
        await redis_backend.stop()


def test_shown_url_hides_only_the_password() -> None:
    assert shown_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert shown_url("redis://h:1/0") == "redis://h:1/0"
