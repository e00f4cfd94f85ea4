"""SecretVault: storage round trip, on-disk safety, tamper detection, rotation, corruption."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from soulflow.security.errors import (
    InvalidCiphertext,
    InvalidKeyError,
    InvalidSecretName,
    KeyPermissionError,
    KeyRecoveryError,
    MissingKeyError,
    SecretNotFound,
    UnsupportedVaultVersion,
    VaultCorruptError,
    VaultError,
)
from soulflow.security.vault import SecretVault
from tests.vaults import file_vault


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stored(vault: SecretVault) -> dict[str, dict[str, str]]:
    return json.loads(vault.secrets_path.read_text())["secrets"]


# ----------------------------------------------------------------- round trip and API


def test_round_trip_and_listing(vault: SecretVault) -> None:
    vault.set("GITHUB_TOKEN", "value-one")
    vault.set("db.password", "pässwörd ✓")
    assert vault.get("GITHUB_TOKEN") == "value-one"
    assert vault.get("db.password") == "pässwörd ✓"
    assert vault.has("GITHUB_TOKEN") and not vault.has("nope")
    assert vault.names() == ["GITHUB_TOKEN", "db.password"]
    vault.set("GITHUB_TOKEN", "value-two")
    assert vault.get("GITHUB_TOKEN") == "value-two"
    assert vault.remove("GITHUB_TOKEN") is True
    assert vault.remove("GITHUB_TOKEN") is False
    assert vault.names() == ["db.password"]


def test_new_instance_reads_what_another_wrote(security_dir: Path) -> None:
    file_vault(security_dir).set("A", "alpha")
    assert file_vault(security_dir).get("A") == "alpha"


def test_file_format_holds_only_ciphertext(vault: SecretVault) -> None:
    vault.set("api.key", "plaintext-marker-123")
    raw = vault.secrets_path.read_text()
    assert "plaintext-marker-123" not in raw
    data = json.loads(raw)
    assert data["version"] == 1
    entry = data["secrets"]["api.key"]
    assert set(entry) == {"ciphertext", "updated_at"}
    assert entry["ciphertext"].startswith("sv1.") and "=" not in entry["ciphertext"]
    assert vault.is_valid_token(entry["ciphertext"])
    assert "T" in entry["updated_at"]  # ISO 8601
    assert [info.name for info in vault.describe()] == ["api.key"]


def test_missing_secret_raises(vault: SecretVault) -> None:
    with pytest.raises(SecretNotFound, match="soulflow secret set NOPE"):
        vault.get("NOPE")


@pytest.mark.parametrize("name", ["", "has space", "slash/name", "x" * 201, "{{secret}}", "é"])
def test_invalid_names_rejected(vault: SecretVault, name: str) -> None:
    with pytest.raises(InvalidSecretName):
        vault.set(name, "v")
    assert vault.has(name) is False
    assert vault.remove(name) is False


def test_non_string_value_rejected(vault: SecretVault) -> None:
    with pytest.raises(TypeError):
        vault.set("A", 1234)  # type: ignore[arg-type]


def test_concurrent_writers_do_not_lose_updates(vault: SecretVault) -> None:
    def write(i: int) -> None:
        for j in range(5):
            vault.set(f"t{i}.{j}", f"value-{i}-{j}")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(vault.names()) == 30
    assert vault.get("t5.4") == "value-5-4"


def test_two_instances_share_one_file(security_dir: Path) -> None:
    a, b = file_vault(security_dir), file_vault(security_dir)
    a.set("A", "alpha")
    b.set("B", "beta")
    assert a.names() == ["A", "B"] and b.get("A") == "alpha"


# ----------------------------------------------------------------- file permissions


def test_key_and_directory_modes(vault: SecretVault, security_dir: Path) -> None:
    assert _mode(security_dir) == 0o700
    assert _mode(vault.key_path) == 0o600
    assert len(vault.key_path.read_bytes()) == 32
    vault.set("A", "alpha")
    assert _mode(vault.secrets_path) == 0o600


def test_directory_created_0700_despite_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        v = file_vault(tmp_path / "deep" / "security")
    finally:
        os.umask(old)
    assert _mode(v.dir) == 0o700
    assert _mode(v.key_path) == 0o600


def test_wide_existing_directory_is_warned_about(
    security_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    security_dir.mkdir(mode=0o755)
    os.chmod(security_dir, 0o755)
    with caplog.at_level(logging.WARNING):
        file_vault(security_dir)
    assert any("chmod 700" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_refuses_key_readable_or_writable_by_others(security_dir: Path, mode: int) -> None:
    file_vault(security_dir).set("A", "alpha")
    key_path = security_dir / "master.key"
    os.chmod(key_path, mode)
    with pytest.raises(KeyPermissionError, match=f"chmod 600 {key_path}"):
        file_vault(security_dir)


def test_refuses_key_made_world_readable_while_running(vault: SecretVault) -> None:
    vault.set("A", "alpha")
    os.chmod(vault.key_path, 0o644)
    with pytest.raises(KeyPermissionError):
        vault.get("A")


def test_refuses_key_of_wrong_length(security_dir: Path) -> None:
    file_vault(security_dir)
    key_path = security_dir / "master.key"
    key_path.write_bytes(b"short")
    with pytest.raises(InvalidKeyError, match="expected exactly 32"):
        file_vault(security_dir)


def test_refuses_symlinked_key(security_dir: Path, tmp_path: Path) -> None:
    file_vault(security_dir)
    real = tmp_path / "elsewhere.key"
    os.replace(security_dir / "master.key", real)
    (security_dir / "master.key").symlink_to(real)
    with pytest.raises(KeyPermissionError, match="symlink"):
        file_vault(security_dir)


def test_missing_key_with_existing_secrets_is_an_error(security_dir: Path) -> None:
    file_vault(security_dir).set("A", "alpha")
    (security_dir / "master.key").unlink()
    with pytest.raises(MissingKeyError, match="restore master.key"):
        file_vault(security_dir)
    assert not (security_dir / "master.key").exists()  # no fresh key silently minted


# ----------------------------------------------------------------- ciphertext integrity


def test_tampered_ciphertext_is_rejected(vault: SecretVault) -> None:
    token = vault.encrypt("A", "alpha")
    prefix, nonce, data = token.split(".")
    flipped = data[:-2] + ("A" if data[-2] != "A" else "B") + data[-1]
    with pytest.raises(InvalidCiphertext):
        vault.decrypt("A", f"{prefix}.{nonce}.{flipped}")


def test_tampered_stored_entry_is_rejected(vault: SecretVault) -> None:
    vault.set("A", "alpha")
    other = vault.encrypt("B", "beta")
    data = json.loads(vault.secrets_path.read_text())
    data["secrets"]["A"]["ciphertext"] = other  # valid token, but bound to another name
    vault.secrets_path.write_text(json.dumps(data))
    with pytest.raises(InvalidCiphertext):
        vault.get("A")


def test_ciphertext_is_bound_to_its_name(vault: SecretVault) -> None:
    token = vault.encrypt("A", "alpha")
    assert vault.decrypt("A", token) == "alpha"
    with pytest.raises(InvalidCiphertext):
        vault.decrypt("B", token)


def test_wrong_key_is_rejected(tmp_path: Path) -> None:
    token = file_vault(tmp_path / "one").encrypt("A", "alpha")
    with pytest.raises(InvalidCiphertext):
        file_vault(tmp_path / "two").decrypt("A", token)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "sv1",
        "sv1..",
        "sv2.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA",
        "sv1.short.data",
        "sv1.AAAAAAAAAAAAAAAA.AAAA",
        "sv1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
        "sv1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAA!",
    ],
)
def test_malformed_tokens(vault: SecretVault, token: str) -> None:
    assert not vault.is_valid_token(token)
    with pytest.raises(InvalidCiphertext):
        vault.decrypt("A", token)


def test_encrypt_uses_fresh_nonces(vault: SecretVault) -> None:
    tokens = {vault.encrypt("A", "same") for _ in range(5)}
    assert len(tokens) == 5
    assert all(vault.is_valid_token(t) for t in tokens)


def test_fingerprint_is_keyed_and_stable(tmp_path: Path) -> None:
    one, two = file_vault(tmp_path / "one"), file_vault(tmp_path / "two")
    assert one.fingerprint("1234") == one.fingerprint("1234")
    assert len(one.fingerprint("1234")) == 12
    assert one.fingerprint("1234") != two.fingerprint("1234")


def test_repr_does_not_leak(vault: SecretVault) -> None:
    vault.set("A", "alpha-secret")
    assert "alpha-secret" not in repr(vault)
    assert vault.key_path.read_bytes().hex() not in repr(vault._sealer())


# ----------------------------------------------------------------- key rotation


def test_rotation_keeps_secrets_and_changes_everything_on_disk(vault: SecretVault) -> None:
    values = {f"name.{i}": f"value-{i}" for i in range(5)}
    vault.set_many(values)
    old_key = vault.key_path.read_bytes()
    old_tokens = {n: e["ciphertext"] for n, e in _stored(vault).items()}
    old_updated = {n: e["updated_at"] for n, e in _stored(vault).items()}

    assert vault.rotate_key() == 5

    assert vault.key_path.read_bytes() != old_key
    assert _mode(vault.key_path) == 0o600
    assert not vault.pending_key_path.exists()
    new_tokens = {n: e["ciphertext"] for n, e in _stored(vault).items()}
    assert all(new_tokens[n] != old_tokens[n] for n in values)
    assert {n: e["updated_at"] for n, e in _stored(vault).items()} == old_updated
    assert {n: vault.get(n) for n in values} == values
    assert file_vault(vault.dir).get("name.3") == "value-3"
    with pytest.raises(InvalidCiphertext):  # old ciphertexts are dead with the old key
        vault.decrypt("name.0", old_tokens["name.0"])


def test_rotation_of_empty_vault(vault: SecretVault) -> None:
    assert vault.rotate_key() == 0
    vault.set("A", "alpha")
    assert vault.get("A") == "alpha"


def test_crash_before_secrets_rewrite_keeps_old_key(
    vault: SecretVault, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault.set("A", "alpha")
    old_key = vault.key_path.read_bytes()

    def crash(*_: object, **__: object) -> None:
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(vault, "_write_entries", crash)
    with pytest.raises(KeyboardInterrupt):
        vault.rotate_key()
    assert vault.pending_key_path.exists()
    monkeypatch.undo()

    reopened = file_vault(vault.dir)
    assert reopened.get("A") == "alpha"
    assert reopened.key_path.read_bytes() == old_key
    assert not reopened.pending_key_path.exists()


def test_crash_before_key_rename_completes_rotation(
    vault: SecretVault, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault.set_many({"A": "alpha", "B": "beta"})
    old_key = vault.key_path.read_bytes()

    def crash() -> None:
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(vault, "_commit_pending_key", crash)
    with pytest.raises(KeyboardInterrupt):
        vault.rotate_key()
    monkeypatch.undo()
    # On disk now: old master.key, new master.key.new, secrets.json sealed with the new key.
    assert vault.pending_key_path.exists()

    reopened = file_vault(vault.dir)
    assert reopened.get("A") == "alpha" and reopened.get("B") == "beta"
    assert reopened.key_path.read_bytes() != old_key
    assert not reopened.pending_key_path.exists()


def test_unrecoverable_rotation_state_is_reported(vault: SecretVault) -> None:
    vault.set("A", "alpha")
    vault.pending_key_path.write_bytes(os.urandom(32))
    os.chmod(vault.pending_key_path, 0o600)
    vault.key_path.unlink()
    with pytest.raises(KeyRecoveryError):
        file_vault(vault.dir)
    assert vault.secrets_path.exists() and vault.pending_key_path.exists()


# ----------------------------------------------------------------- corrupt secrets.json


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"version": 1}',
        b'{"version": 0, "secrets": {}}',
        b'{"version": 1, "secrets": {"A": {"ciphertext": 5, "updated_at": "x"}}}',
        b'{"version": 1, "secrets": {"bad name": {"ciphertext": "x", "updated_at": "x"}}}',
    ],
)
def test_corrupt_file_is_moved_aside_with_clear_error(
    vault: SecretVault, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    vault.secrets_path.write_bytes(content)
    with caplog.at_level(logging.WARNING), pytest.raises(VaultCorruptError, match="moved to"):
        vault.names()
    aside = list(vault.dir.glob("secrets.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert not vault.secrets_path.exists()
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    vault.set("fresh", "start")  # the vault is usable again afterwards
    assert vault.names() == ["fresh"]


def test_second_corruption_does_not_overwrite_first(vault: SecretVault) -> None:
    for _ in range(2):
        vault.secrets_path.write_text("garbage")
        with pytest.raises(VaultCorruptError):
            vault.get("A")
    assert len(list(vault.dir.glob("secrets.json.corrupt-*"))) == 2


def test_newer_format_version_is_not_moved_aside(vault: SecretVault) -> None:
    vault.secrets_path.write_text('{"version": 2, "secrets": {}}')
    with pytest.raises(UnsupportedVaultVersion, match="upgrade"):
        vault.names()
    assert vault.secrets_path.exists()


def test_all_vault_errors_share_a_base(vault: SecretVault) -> None:
    with pytest.raises(VaultError):
        vault.get("missing")
