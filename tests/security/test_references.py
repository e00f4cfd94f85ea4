"""Pre-flight inspection of secret references and the user-facing message."""

from __future__ import annotations

import json
from pathlib import Path

from soulflow.security.references import (
    ReferenceReport,
    inspect_secret_references_for_orchestration,
    secret_resolution_required_message,
)
from soulflow.security.vault import SecretVault
from tests.vaults import file_vault


def test_all_present_is_ok(vault: SecretVault) -> None:
    vault.set("GITHUB_TOKEN", "ghp-value")
    report = inspect_secret_references_for_orchestration("curl -H {{secret:GITHUB_TOKEN}}", vault)
    assert report == ReferenceReport([], [], True, ["GITHUB_TOKEN"])
    assert secret_resolution_required_message(report) == ""


def test_text_without_references_is_ok(vault: SecretVault) -> None:
    assert inspect_secret_references_for_orchestration("plain {{not:a ref}}", vault).ok


def test_missing_names_are_reported_once_in_order(vault: SecretVault) -> None:
    vault.set("PRESENT", "x-value")
    text = "{{secret:B}} {{secret:PRESENT}} {{secret:A}} {{secret:B}}"
    report = inspect_secret_references_for_orchestration(text, vault)
    assert report.missing == ["B", "A"]
    assert report.invalid_ciphertexts == []
    assert not report.ok


def test_inline_ciphertext_is_checked_with_its_name(vault: SecretVault) -> None:
    good = vault.encrypt("DEPLOY_KEY", "inline-value")
    ok = inspect_secret_references_for_orchestration(f"{{{{secret:DEPLOY_KEY:{good}}}}}", vault)
    assert ok.ok  # inline values need not be stored
    relabelled = inspect_secret_references_for_orchestration(f"{{{{secret:OTHER:{good}}}}}", vault)
    assert relabelled.invalid_ciphertexts == ["OTHER"] and not relabelled.ok
    damaged = inspect_secret_references_for_orchestration("{{secret:X:sv1.garbage}}", vault)
    assert damaged.invalid_ciphertexts == ["X"]


def test_inline_token_from_another_vault_is_invalid(vault: SecretVault, tmp_path: Path) -> None:
    foreign = file_vault(tmp_path / "other").encrypt("A", "v-value")
    report = inspect_secret_references_for_orchestration(f"{{{{secret:A:{foreign}}}}}", vault)
    assert report.invalid_ciphertexts == ["A"]


def test_bare_tokens_resolve_only_when_stored(vault: SecretVault) -> None:
    vault.set("A", "alpha")
    token = json.loads(vault.secrets_path.read_text())["secrets"]["A"]["ciphertext"]
    assert inspect_secret_references_for_orchestration(f"use {token}", vault).ok
    unknown = vault.encrypt("A", "alpha")  # valid ciphertext, but not the stored one
    report = inspect_secret_references_for_orchestration(f"use {unknown}", vault)
    assert report.invalid_ciphertexts == [unknown[:12] + "…"]


def test_stored_entry_that_no_longer_decrypts_is_invalid(vault: SecretVault) -> None:
    vault.set("A", "alpha")
    data = json.loads(vault.secrets_path.read_text())
    data["secrets"]["A"]["ciphertext"] = vault.encrypt("B", "beta")
    vault.secrets_path.write_text(json.dumps(data))
    report = inspect_secret_references_for_orchestration("{{secret:A}}", vault)
    assert report.invalid_ciphertexts == ["A"] and report.missing == []


def test_json_like_values_are_walked(vault: SecretVault) -> None:
    args = {"headers": {"Authorization": "Bearer {{secret:TOKEN}}"}, "argv": ["x", 1, None]}
    assert inspect_secret_references_for_orchestration(args, vault).missing == ["TOKEN"]


def test_message_for_one_missing_secret(vault: SecretVault) -> None:
    report = inspect_secret_references_for_orchestration("{{secret:GITHUB_TOKEN}}", vault)
    assert secret_resolution_required_message(report) == (
        "I can't run this yet: secret GITHUB_TOKEN is not stored. Set it with "
        "`/secret set GITHUB_TOKEN` in a direct message or `soulflow secret set GITHUB_TOKEN`."
    )


def test_message_for_several_problems_never_contains_values(vault: SecretVault) -> None:
    vault.set("A", "super-secret-value")
    data_token = vault.encrypt("A", "super-secret-value")
    text = f"{{{{secret:X}}}} {{{{secret:Y}}}} {{{{secret:B:{data_token}}}}}"
    report = inspect_secret_references_for_orchestration(text, vault)
    message = secret_resolution_required_message(report)
    assert message.startswith("I can't run this yet: secrets X, Y are not stored.")
    assert "secret B could not be decrypted" in message
    assert "super-secret-value" not in message
    assert data_token not in message
