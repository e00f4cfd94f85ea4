"""`soulflow cron` and `soulflow secret` with SOULFLOW_BACKEND=redis and no daemon on the node:
they write to Redis, where every node reads (the real CLI in a subprocess, on the private
redis-server), and a Redis that is not there is one sentence."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from soulflow.backends.redis.cron import RedisCronStore
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.backends.redis.vault import RedisSecretEntries
from soulflow.security.vault import SecretVault
from tests.backends.redis_server import RedisServer, free_port
from tests.backends.service_stores import state_redis  # noqa: F401
from tests.e2e.harness import base_env


def cli(workspace: Path, url: str, prefix: str, *args: str,
        stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    workspace.mkdir(exist_ok=True)
    env = base_env(workspace, SOULFLOW_BACKEND="redis", REDIS_URL=url, REDIS_KEY_PREFIX=prefix,
                   REDIS_LEASE_TTL_S="3")
    done = subprocess.run([sys.executable, "-m", "soulflow", *args], env=env, input=stdin,
                          capture_output=True, timeout=60)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


def test_cron_commands_write_the_jobs_every_node_reads(
        tmp_path: Path, state_redis: StateRedis,  # noqa: F811
        redis_server: RedisServer) -> None:
    url, prefix = redis_server.url, state_redis.prefix
    added = cli(tmp_path / "node-a", url, prefix, "cron", "add", "--chat", "local:ops",
                "--every", "1h", "--name", "disk", "--json", "Check", "the", "disk")
    assert added.returncode == 0, added.stderr
    job_id = json.loads(added.stdout)["job"]["id"]
    [job] = RedisCronStore(state_redis).list()  # what every node's scheduler reads
    assert job.id == job_id and job.text == "Check the disk" and job.enabled
    assert not (tmp_path / "node-a" / "runtime" / "cron" / "cron-store.json").exists()
    listed = cli(tmp_path / "node-b", url, prefix, "cron", "list")  # another node's workspace
    assert job_id in listed.stdout and "disk" in listed.stdout
    ran = cli(tmp_path / "node-b", url, prefix, "cron", "run", job_id)
    assert "a running node fires it within a second" in ran.stdout
    assert cli(tmp_path / "node-b", url, prefix, "cron", "disable", job_id).returncode == 0
    assert not RedisCronStore(state_redis).get(job_id).enabled  # type: ignore[union-attr]
    assert cli(tmp_path / "node-a", url, prefix, "cron", "rm", job_id).returncode == 0
    assert RedisCronStore(state_redis).list() == []


def test_secret_commands_seal_into_redis_with_this_nodes_key(
        tmp_path: Path, state_redis: StateRedis,  # noqa: F811
        redis_server: RedisServer) -> None:
    url, prefix = redis_server.url, state_redis.prefix
    node_a = tmp_path / "node-a"
    stored = cli(node_a, url, prefix, "secret", "set", "DB_PASSWORD",
                 stdin=b"hunter2-secret\n")
    assert stored.returncode == 0, stored.stderr
    security = node_a / "runtime" / "security"
    assert not (security / "secrets.json").exists()
    assert b"hunter2-secret" not in b"".join(state_redis.client.hvals(
        f"{prefix}vault:secrets"))
    node_b = tmp_path / "node-b" / "runtime" / "security"  # the key deployed to node B
    node_b.mkdir(parents=True, mode=0o700)
    shutil.copy2(security / "master.key", node_b / "master.key")
    other = SecretVault(node_b, entries=RedisSecretEntries(state_redis))
    assert other.get("DB_PASSWORD") == "hunter2-secret"
    listed = cli(tmp_path / "node-b", url, prefix, "secret", "list")
    assert listed.stdout.strip() == "DB_PASSWORD\tglobal"
    rotated = cli(node_a, url, prefix, "secret", "rotate-key")
    assert "re-encrypted 1 secret(s)" in rotated.stdout
    assert "Copy " in rotated.stdout and "every other node" in rotated.stdout
    shutil.copy2(security / "master.key", node_b / "master.key")
    assert other.get("DB_PASSWORD") == "hunter2-secret"
    assert cli(tmp_path / "node-b", url, prefix, "secret", "rm", "DB_PASSWORD").returncode == 0
    assert other.names() == []


def test_an_unreachable_redis_is_one_sentence(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (("cron", "list"), ("secret", "list")):
        done = cli(tmp_path / "ws", url, "t:", *args)
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("soulflow: error: Redis at "), \
            done.stderr
