"""Sealing inbound text: values go to the vault, references stay in the text."""

from __future__ import annotations

import hashlib
import re

import pytest

from soulflow.security.errors import VaultError
from soulflow.security.seal import (
    SealResult,
    inbound_secret_name,
    seal_inbound_sensitive_text,
    seal_many,
)
from soulflow.security.syntax import is_valid_name
from soulflow.security.vault import SecretVault
from tests.security import samples

NAME_RE = re.compile(
    r"inbound\.(?P<provider>[A-Za-z0-9_.\-]+)\.c(?P<chat>[0-9a-f]{12})\."
    r"(?P<type>[a-z_]+)\.v(?P<value>[0-9a-f]{12})"
)


def seal(text: str, vault: SecretVault, chat_id: str = "C123") -> SealResult:
    return seal_inbound_sensitive_text(text, provider="slack", chat_id=chat_id, vault=vault)


def test_value_is_stored_and_replaced_by_reference(vault: SecretVault) -> None:
    result = seal("login: password=hunter22 thanks", vault)
    [sealed] = result.sealed
    assert result.text == f"login: password={{{{secret:{sealed.name}}}}} thanks"
    assert "hunter22" not in result.text
    assert sealed.type == "password"
    assert vault.get(sealed.name) == "hunter22"
    assert result.changed


def test_name_layout(vault: SecretVault) -> None:
    [sealed] = seal("pin: 123456", vault, chat_id="D42").sealed
    match = NAME_RE.fullmatch(sealed.name)
    assert match is not None, sealed.name
    assert match["provider"] == "slack"
    assert match["chat"] == hashlib.sha256(b"D42").hexdigest()[:12]
    assert match["type"] == "pin"
    assert match["value"] == vault.fingerprint("123456")
    # the value part is keyed: an unkeyed hash would let anyone brute-force a PIN
    assert match["value"] != hashlib.sha256(b"123456").hexdigest()[:12]


def test_offsets_point_at_references_in_sealed_text(vault: SecretVault) -> None:
    text = f"a password=hunter22 b {samples.OPENAI_KEY} c {samples.VISA_TEST_CARD} d"
    result = seal(text, vault)
    assert [s.type for s in result.sealed] == ["password", "openai_key", "card"]
    for s in result.sealed:
        assert result.text[s.start : s.end] == "{{secret:" + s.name + "}}"
    assert result.text.startswith("a password={{secret:") and result.text.endswith("}} d")


def test_every_sample_is_sealed_and_recoverable(vault: SecretVault) -> None:
    values = [
        samples.OPENAI_KEY,
        samples.ANTHROPIC_KEY,
        samples.GITHUB_PAT,
        samples.SLACK_TOKENS[0],
        samples.AWS_KEY,
        samples.JWT,
        samples.PEM,
    ]
    result = seal("\n".join(f"item: {v}" for v in values), vault)
    assert [vault.get(s.name) for s in result.sealed] == values
    for v in values:
        assert v not in result.text


def test_idempotent(vault: SecretVault) -> None:
    first = seal(f"password=hunter22 and {samples.GITHUB_PAT} and 비번: qwer1234", vault)
    names_after_first = vault.names()
    second = seal(first.text, vault)
    assert second.text == first.text
    assert second.sealed == []
    assert vault.names() == names_after_first


def test_same_value_same_name_one_entry(vault: SecretVault) -> None:
    a = seal("password=hunter22", vault)
    b = seal("again: password=hunter22", vault)
    assert a.sealed[0].name == b.sealed[0].name
    assert len(vault.names()) == 1


def test_same_value_in_other_chat_gets_its_own_name(vault: SecretVault) -> None:
    a = seal("password=hunter22", vault, chat_id="one")
    b = seal("password=hunter22", vault, chat_id="two")
    assert a.sealed[0].name != b.sealed[0].name


def test_nothing_sensitive_leaves_text_and_vault_untouched(vault: SecretVault) -> None:
    result = seal("order 1234567812345678 shipped; password=ab", vault)
    assert result == SealResult("order 1234567812345678 shipped; password=ab", [])
    assert not result.changed
    assert not vault.secrets_path.exists()


def test_existing_references_and_tokens_are_left_alone(vault: SecretVault) -> None:
    token = vault.encrypt("X", "value")
    text = f"use {{{{secret:X}}}} and {{{{secret:X:{token}}}}} and bare {token}"
    assert seal(text, vault).text == text


def test_odd_provider_and_type_are_sanitised() -> None:
    name = inbound_secret_name("Tele gram/✓", "chat", "weird type!", "abc")
    assert is_valid_name(name)
    assert name.startswith("inbound.Tele_gram.c")


def test_seal_many_stores_once_and_keeps_order(vault: SecretVault) -> None:
    results = seal_many(
        ["nothing here", "token=abcdefgh", "/tmp/uploads/password=hunter22.txt", "token=abcdefgh"],
        provider="telegram",
        chat_id="-100123",
        vault=vault,
    )
    assert [r.changed for r in results] == [False, True, True, True]
    assert results[1].text == results[3].text
    assert len(vault.names()) == 2
    assert all("abcdefgh" not in r.text and "hunter22" not in r.text for r in results)


def test_vault_failure_propagates_so_plaintext_is_not_persisted(
    vault: SecretVault, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise VaultError("disk full")

    monkeypatch.setattr(vault, "set_many", broken)
    with pytest.raises(VaultError):
        seal("password=hunter22", vault)
