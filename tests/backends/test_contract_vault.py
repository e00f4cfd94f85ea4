"""The vault, the same assertions against ``secrets.json`` and the Redis hash: round trip,
scopes, removal rules and key rotation; then what only shared entries do: a secret sealed on
node A opens on node B (same key file, its own copy on its own disk), the key never reaches
Redis, a node without the key refuses to start over existing secrets, and a rotation reaches
another node when its key file is replaced."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from soulflow.backends.base import EntriesChanged
from soulflow.backends.redis.vault import RedisSecretEntries
from soulflow.security.errors import InvalidCiphertext, MissingKeyError, SecretNotFound
from soulflow.security.vault import SecretVault
from soulflow.security.vault_records import StoredSecret
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import fresh_state, node_states
from tests.vaults import file_vault

OpenVault = Callable[[Path], SecretVault]  # a vault whose key and lock live in that directory

CHAT_A, CHAT_B = "telegram:1", "slack:C2"


@contextmanager
def redis_vaults_on(url: str) -> Iterator[OpenVault]:
    """Vaults sharing one Redis hash, as the nodes of one cluster do, each on its own client."""
    with node_states(url) as open_state:
        yield lambda security_dir: SecretVault(security_dir,
                                               entries=RedisSecretEntries(open_state()))


@pytest.fixture(params=["file", "redis"])
def open_vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenVault]:
    """File: every vault is the same workspace's (entries in ``<dir>/secrets.json``). Redis:
    every vault shares the hash, as the nodes of one cluster do."""
    if request.param == "file":
        yield file_vault
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with redis_vaults_on(server.url) as open_redis:
        yield open_redis


def test_values_round_trip_and_are_listed(open_vault: OpenVault, tmp_path: Path) -> None:
    vault = open_vault(tmp_path / "sec")
    vault.set("API_KEY", "sk-live-1234567890 ☕")
    vault.set_many({"B": "beta", "C": "gamma"}, scope=CHAT_A)
    again = open_vault(tmp_path / "sec")
    assert again.get("API_KEY") == "sk-live-1234567890 ☕"
    assert again.names() == ["API_KEY", "B", "C"]
    assert again.names(chat=CHAT_B) == ["API_KEY"]
    assert [(i.name, i.scope) for i in again.describe(chat=CHAT_A)] == [
        ("API_KEY", None), ("B", CHAT_A), ("C", CHAT_A)]
    assert again.info("B").scope == CHAT_A  # type: ignore[union-attr]
    assert again.has("B", chat=CHAT_A) and not again.has("B", chat=CHAT_B)
    with pytest.raises(SecretNotFound):
        again.get("B", chat=CHAT_B)
    token = again.encrypt("INLINE", "inline value")
    assert vault.decrypt("INLINE", token) == "inline value"


def test_a_chat_cannot_take_or_remove_another_scopes_name(open_vault: OpenVault,
                                                         tmp_path: Path) -> None:
    vault = open_vault(tmp_path / "sec")
    vault.set("SHARED", "operator's")
    vault.set("MINE", "a's", scope=CHAT_A)
    refused = vault.set_many({"SHARED": "stolen", "MINE": "b's", "NEW": "b new"},
                             scope=CHAT_B, keep_foreign=True)
    assert sorted(refused) == ["MINE", "SHARED"]
    other = open_vault(tmp_path / "sec")
    assert other.get("SHARED") == "operator's" and other.get("MINE") == "a's"
    assert other.get("NEW", chat=CHAT_B) == "b new"
    assert other.set_many({"MINE": "a again"}, scope=CHAT_A, keep_foreign=True) == []
    assert not other.remove("MINE", scope=CHAT_B, any_scope=False)
    assert not other.remove("SHARED", scope=CHAT_A, any_scope=False)
    assert other.remove("MINE", scope=CHAT_A, any_scope=False)
    assert other.remove("SHARED") and not other.remove("SHARED")
    assert open_vault(tmp_path / "sec").names() == ["NEW"]


def test_rotation_re_encrypts_every_entry(open_vault: OpenVault, tmp_path: Path) -> None:
    vault = open_vault(tmp_path / "sec")
    vault.set_many({"A": "alpha", "B": "beta"})
    vault.set("C", "gamma", scope=CHAT_A)
    before = {i.name: i.updated_at for i in vault.describe()}
    old_key = vault.key_path.read_bytes()
    old_token = vault.encrypt("A", "alpha")
    assert vault.rotate_key() == 3
    assert vault.key_path.read_bytes() != old_key and not vault.pending_key_path.exists()
    again = open_vault(tmp_path / "sec")
    assert [again.get(n) for n in ("A", "B")] == ["alpha", "beta"]
    assert again.get("C", chat=CHAT_A) == "gamma"
    assert {i.name: i.updated_at for i in again.describe()} == before
    with pytest.raises(InvalidCiphertext):  # the old key is gone
        again.decrypt("A", old_token)


# ----------------------------------------------------------------- only shared entries


@pytest.fixture
def redis_vaults(redis_server: RedisServer, tmp_path: Path) -> Iterator[OpenVault]:
    with redis_vaults_on(redis_server.url) as open_node:
        yield open_node


def copy_key(source: SecretVault, node_dir: Path) -> None:
    """What an operator does: the same key file on every node's own disk."""
    node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copy2(source.key_path, node_dir / "master.key")


def test_a_secret_sealed_on_one_node_opens_on_another(redis_vaults: OpenVault,
                                                      tmp_path: Path) -> None:
    node_a = redis_vaults(tmp_path / "a")
    node_a.set("DB_PASSWORD", "hunter2-🔑", scope=CHAT_A)
    copy_key(node_a, tmp_path / "b")
    node_b = redis_vaults(tmp_path / "b")
    assert node_b.get("DB_PASSWORD", chat=CHAT_A) == "hunter2-🔑"
    assert not (tmp_path / "a" / "secrets.json").exists()  # the entries are in Redis


def test_the_key_never_reaches_redis(redis_server: RedisServer, tmp_path: Path) -> None:
    state = fresh_state(redis_server.url)
    vault = SecretVault(tmp_path / "a", entries=RedisSecretEntries(state))
    vault.set_many({"A": "alpha", "B": "beta"})
    vault.rotate_key()
    key = vault.key_path.read_bytes()
    everything = b""
    for name in state.client.keys(f"{state.prefix}*"):
        if state.client.type(name) == b"hash":
            everything += b"".join(sum(state.client.hgetall(name).items(), ()))
        else:
            everything += state.client.get(name) or b""
    assert state.client.exists(f"{state.prefix}vault:key_check")
    assert key not in everything and key.hex().encode() not in everything
    assert b"alpha" not in everything and b"beta" not in everything
    state.close()


def test_a_node_without_the_key_refuses_existing_secrets(redis_vaults: OpenVault,
                                                         tmp_path: Path) -> None:
    redis_vaults(tmp_path / "a").set("A", "alpha")
    with pytest.raises(MissingKeyError, match="copy it from another node"):
        redis_vaults(tmp_path / "b")
    assert not (tmp_path / "b" / "master.key").exists()


def test_a_rotation_reaches_a_node_when_its_key_file_is_replaced(redis_vaults: OpenVault,
                                                                 tmp_path: Path) -> None:
    node_a = redis_vaults(tmp_path / "a")
    node_a.set("A", "alpha")
    copy_key(node_a, tmp_path / "b")
    node_b = redis_vaults(tmp_path / "b")
    assert node_b.get("A") == "alpha"
    node_a.rotate_key()
    with pytest.raises(InvalidCiphertext):  # B still holds the old key
        node_b.get("A")
    copy_key(node_a, tmp_path / "b")  # the operator deploys the new key file
    assert node_b.get("A") == "alpha"  # re-read without a restart


def test_a_node_with_another_key_says_so_at_startup(redis_vaults: OpenVault,
                                                      tmp_path: Path) -> None:
    node_a = redis_vaults(tmp_path / "a")
    assert node_a.key_problem is None
    stray = redis_vaults(tmp_path / "stray")  # started before any secret: made its own key
    assert stray.key_problem is not None and "copy the key file" in stray.key_problem
    copy_key(node_a, tmp_path / "b")
    assert redis_vaults(tmp_path / "b").key_problem is None
    node_a.set("A", "alpha")
    node_a.rotate_key()  # the recorded fingerprint follows the rotation
    assert redis_vaults(tmp_path / "b").key_problem is not None  # b still has the old key
    copy_key(node_a, tmp_path / "b")
    assert redis_vaults(tmp_path / "b").key_problem is None


def test_a_rotation_never_swaps_over_another_nodes_write(redis_server: RedisServer) -> None:
    state = fresh_state(redis_server.url)
    here = RedisSecretEntries(state)
    there = RedisSecretEntries(fresh_state(redis_server.url, state.prefix))
    here.put({"A": StoredSecret("sv1.old", "2030-01-01T00:00:00+00:00")}, keep_foreign=False)
    read = here.read()
    there.put({"B": StoredSecret("sv1.other", "2030-01-01T00:00:01+00:00")},
              keep_foreign=False)
    with pytest.raises(EntriesChanged):
        here.replace(read, {"A": StoredSecret("sv1.new", "2030-01-01T00:00:00+00:00")},
                     key_fingerprint="f" * 12)
    assert {n: e.ciphertext for n, e in here.read().items()} == {"A": "sv1.old",
                                                                 "B": "sv1.other"}
    state.close()
