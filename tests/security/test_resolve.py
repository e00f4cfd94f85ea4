"""All-or-nothing resolution inside tool execution, and masking tool output."""

from __future__ import annotations

import copy
import json

from soulflow.security.resolve import mask_known_secrets, resolve_secret_references
from soulflow.security.syntax import REDACTED
from soulflow.security.vault import SecretVault


def test_nested_structure_is_resolved_without_mutating_input(vault: SecretVault) -> None:
    vault.set_many({"TOKEN": "tok-value", "USER": "bob"})
    original = {
        "url": "https://{{secret:USER}}@example.com",
        "headers": [("Authorization", "Bearer {{secret:TOKEN}}")],
        "count": 3,
        "flag": True,
        "none": None,
    }
    snapshot = copy.deepcopy(original)
    report = resolve_secret_references(original, vault)
    assert report.ok and report.missing == [] and report.invalid == []
    assert report.value == {
        "url": "https://bob@example.com",
        "headers": [("Authorization", "Bearer tok-value")],
        "count": 3,
        "flag": True,
        "none": None,
    }
    assert original == snapshot
    assert report.secrets == {"TOKEN": "tok-value", "USER": "bob"}


def test_plain_string_and_repeated_reference(vault: SecretVault) -> None:
    vault.set("P", "pw12")
    report = resolve_secret_references("{{secret:P}}/{{secret:P}}", vault)
    assert report.value == "pw12/pw12"


def test_inline_and_bare_tokens(vault: SecretVault) -> None:
    vault.set("STORED", "stored-value")
    bare = json.loads(vault.secrets_path.read_text())["secrets"]["STORED"]["ciphertext"]
    inline = vault.encrypt("INLINE", "inline-value")
    text = f"a={{{{secret:INLINE:{inline}}}}} b={bare}"
    report = resolve_secret_references([text], vault)
    assert report.ok
    assert report.value == ["a=inline-value b=stored-value"]


def test_any_failure_returns_the_original_untouched(vault: SecretVault) -> None:
    vault.set("GOOD", "good-value")
    original = {"a": "{{secret:GOOD}}", "b": ["{{secret:MISSING}}", "{{secret:BAD:sv1.nope}}"]}
    report = resolve_secret_references(original, vault)
    assert not report.ok
    assert report.value is original
    assert report.missing == ["MISSING"]
    assert report.invalid == ["BAD"]
    assert report.secrets == {}
    assert "good-value" not in json.dumps(report.value)


def test_value_without_references_passes_through(vault: SecretVault) -> None:
    value = {"x": ["plain"]}
    report = resolve_secret_references(value, vault)
    assert report.ok and report.value is value


def test_report_repr_hides_plaintext(vault: SecretVault) -> None:
    vault.set("P", "very-secret-plaintext")
    report = resolve_secret_references("{{secret:P}}", vault)
    assert "very-secret-plaintext" not in repr(report)


def test_mask_with_plain_values() -> None:
    out = mask_known_secrets("token hunter22 and abc and hunter22", ["hunter22", "abc"])
    assert out == f"token {REDACTED} and abc and {REDACTED}"  # "abc" is below 4 chars


def test_mask_with_names_puts_references_back_longest_first() -> None:
    text = "echo pass-long pass"
    out = mask_known_secrets(text, {"SHORT": "pass", "LONG": "pass-long"})
    assert out == "echo {{secret:LONG}} {{secret:SHORT}}"


def test_mask_round_trip_after_resolution(vault: SecretVault) -> None:
    vault.set("API_KEY", "k-12345678")
    report = resolve_secret_references("curl -H 'X-Key: {{secret:API_KEY}}'", vault)
    tool_output = "> X-Key: k-12345678\n< 401 for key k-12345678"
    masked = mask_known_secrets(tool_output, report.secrets)
    assert "k-12345678" not in masked
    assert masked.count("{{secret:API_KEY}}") == 2


def test_mask_nothing_to_do() -> None:
    assert mask_known_secrets("", ["abcd"]) == ""
    assert mask_known_secrets("text", []) == "text"
    assert mask_known_secrets("text", ["absent"]) == "text"
