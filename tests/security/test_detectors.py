"""Per-detector true and false positives, and overlap resolution."""

from __future__ import annotations

import pytest

from soulflow.security.detectors import (
    ALL_DETECTORS,
    REDACTION_DETECTORS,
    find_sensitive_spans,
    luhn_valid,
)
from tests.security import samples


def found(text: str) -> list[tuple[str, str]]:
    """(type, value) pairs detected in ``text``."""
    return [(d.type, text[d.start : d.end]) for d in find_sensitive_spans(text)]


# ----------------------------------------------------------------- key = value assignments


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter22", [("password", "hunter22")]),
        ("password: hunter22", [("password", "hunter22")]),
        ('password = "correct horse"', [("password", "correct horse")]),
        ("passwd='s3cr3t!'", [("password", "s3cr3t!")]),
        ("DB_PASSWORD=pg-pass-99", [("password", "pg-pass-99")]),
        ('{"db_password": "pg-pass-99"}', [("password", "pg-pass-99")]),
        ("pwd: abcd", [("password", "abcd")]),
        ("my pin: 1234", [("pin", "1234")]),
        ("PIN code = 987654", [("pin", "987654")]),
        ("token=abcdefgh", [("token", "abcdefgh")]),
        ("SLACK_BOT_TOKEN: opaque-value-1", [("token", "opaque-value-1")]),
        ("api key: abcd-1234", [("api_key", "abcd-1234")]),
        ("api_key=zzzz9999", [("api_key", "zzzz9999")]),
        ("apikey = qwerty12", [("api_key", "qwerty12")]),
        ("client secret: 0a9s8d7f6g", [("secret", "0a9s8d7f6g")]),
        ("SECRET_KEY=django-insecure-xyz", [("secret", "django-insecure-xyz")]),
        ("access key: abcdef123456", [("access_key", "abcdef123456")]),
        ("private_key: not-a-pem-but-long", [("private_key", "not-a-pem-but-long")]),
    ],
)
def test_assignment_true_positives(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("비밀번호: 가나다라1234", [("password", "가나다라1234")]),
        ("비밀 번호 = qwer!234", [("password", "qwer!234")]),
        ("비번=qwer1234", [("password", "qwer1234")]),
        ("와이파이비번: 12345678", [("password", "12345678")]),
        ("패스워드: abcd!", [("password", "abcd!")]),
        ("암호: zxcv0987", [("password", "zxcv0987")]),
        ("토큰: abcdefgh", [("token", "abcdefgh")]),
        ("시크릿 = zxcvbnm", [("secret", "zxcvbnm")]),
        ("키: k-998877", [("api_key", "k-998877")]),
        ("API 키: key-123456", [("api_key", "key-123456")]),
        ("핀: 4321", [("pin", "4321")]),
        ("핀번호：5678", [("pin", "5678")]),  # full-width colon
    ],
)
def test_korean_assignment_true_positives(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "password=ab",  # shorter than 4: not sealed
        "password: abc",
        'password = ""',
        "my password is long and secret",  # no separator
        "password:",
        "spin: 1234",  # "pin" inside a word
        "max_tokens: 4096",
        "token_count: 1234",
        "tokenizer: bert-base",
        "password_hint: my dog",
        "암호화: AES256",  # "encryption", not "password"
        "키보드: 1234",  # "keyboard"
        "password = get_password()",
        "password=$DB_PASSWORD",
        "password: ${DB_PASSWORD}",
        "password: ****",
        "password: <your password here>",
        "password: null",
        "token: [REDACTED]",
        "password={{secret:some.name}}",
    ],
)
def test_assignment_false_positives(text: str) -> None:
    assert found(text) == []


def test_only_the_value_is_reported() -> None:
    text = "login with password=hunter22 please"
    [det] = find_sensitive_spans(text)
    assert text[: det.start] == "login with password="
    assert text[det.end :] == " please"


# ----------------------------------------------------------------- cards and accounts


def test_luhn_reference_numbers() -> None:
    assert luhn_valid("4111111111111111")
    assert luhn_valid("79927398713")
    assert not luhn_valid(samples.ORDER_NUMBER)


@pytest.mark.parametrize(
    "text",
    [
        f"pay with {samples.VISA_TEST_CARD} please",
        "pay with 4111-1111-1111-1111 please",
        "pay with 4111111111111111 please",
        "amex 378282246310005",  # 15 digits
        "ref 2024 4111 1111 1111 1111",  # surrounding digits cannot hide the card
    ],
)
def test_luhn_valid_card_is_detected(text: str) -> None:
    [(kind, value)] = found(text)
    assert kind == "card"
    assert value.replace(" ", "").replace("-", "") in {"4111111111111111", "378282246310005"}


@pytest.mark.parametrize(
    "text",
    [
        f"order {samples.ORDER_NUMBER} shipped",  # 16 digits failing Luhn
        "order 1234-5678-1234-5678 shipped",
        "ts=1700000000001",  # 13-digit timestamp, fails Luhn
        "0000 0000 0000 0000",  # passes Luhn, obviously not a card
        "call 010-1234-5678",  # too short
        "id 41111111111111110000",  # 22 digits, no groups
        "x4111111111111111",  # glued to a word
    ],
)
def test_numbers_that_are_not_cards(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card: 1234-5678-9012-3456", [("card", "1234-5678-9012-3456")]),  # no Luhn needed
        ("카드번호: 1234 5678 9012 3456", [("card", "1234 5678 9012 3456")]),
        ("카드번호는 1234567890123456", [("card", "1234567890123456")]),
        ("account no: 110-234-567890", [("account", "110-234-567890")]),
        ("bank account number = 12345678", [("account", "12345678")]),
        ("계좌번호: 110-234-567890", [("account", "110-234-567890")]),
        ("계좌: 국민은행 123456-78-901234", [("account", "123456-78-901234")]),
    ],
)
def test_financial_assignments(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize("text", ["card ending 1234", "account: bob", "accounts 12345678"])
def test_financial_false_positives(text: str) -> None:
    assert found(text) == []


# ----------------------------------------------------------------- token shapes


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        (samples.OPENAI_KEY, "openai_key"),
        (samples.OPENAI_PROJECT_KEY, "openai_key"),
        (samples.ANTHROPIC_KEY, "anthropic_key"),
        *[(t, "github_token") for t in samples.GITHUB_TOKENS],
        (samples.GITHUB_PAT, "github_token"),
        *[(t, "slack_token") for t in samples.SLACK_TOKENS],
        (samples.AWS_KEY, "aws_access_key"),
        (samples.JWT, "jwt"),
    ],
)
def test_token_shapes(token: str, kind: str) -> None:
    for text in (token, f"use {token} now", f"({token}).", f'"{token}",'):
        assert found(text) == [(kind, token)], text


@pytest.mark.parametrize(
    "text",
    [
        "task-abcdefghijklmnopqrstuvwxyz",  # "sk-" inside a word
        "sk-short",
        "ghp_tooShort",
        "xoxb-short",
        "AKIAlowercase0000000",
        "AKIA1234",
        "eyJhbGciOi.only-two",
        "the bearer of bad news",
        "Bearer authentication",  # no digit: a word, not a token
        "a basic understanding",
        "Basic aGVsbG8gd29ybGQ=",  # base64 of "hello world": no user:pass colon
    ],
)
def test_token_shape_false_positives(text: str) -> None:
    assert found(text) == []


def test_bearer_and_basic_headers_keep_the_scheme_visible() -> None:
    text = f"Authorization: Bearer {samples.BEARER}\nAuthorization: Basic {samples.BASIC}"
    assert found(text) == [("bearer_token", samples.BEARER), ("basic_auth", samples.BASIC)]
    assert found(f"authorization: bearer {samples.BEARER}") == [("bearer_token", samples.BEARER)]


def test_bearer_jwt_is_typed_as_jwt() -> None:
    assert found(f"Authorization: Bearer {samples.JWT}") == [("jwt", samples.JWT)]


def test_pem_block_is_one_value_swallowing_inner_lines() -> None:
    text = f"here is my key:\n{samples.PEM}\nthanks"
    assert found(text) == [("private_key", samples.PEM)]


def test_truncated_pem_block_is_sealed_to_the_end() -> None:
    text = "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    [(kind, value)] = found(text)
    assert kind == "private_key" and value.startswith("-----BEGIN") and text.endswith(value)


def test_public_key_is_not_sealed() -> None:
    assert found("-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----") == []


# ----------------------------------------------------------------- overlap and protection


def test_longest_overlapping_candidate_wins_and_specific_type_breaks_ties() -> None:
    text = f"password={samples.ANTHROPIC_KEY}"
    assert found(text) == [("anthropic_key", samples.ANTHROPIC_KEY)]


def test_assignment_of_bearer_header_is_not_double_sealed() -> None:
    assert found(f"token: Bearer {samples.BEARER}") == [("bearer_token", samples.BEARER)]


def test_multiple_values_in_order() -> None:
    text = f"user=bob password=hunter22 key {samples.OPENAI_KEY} card {samples.VISA_TEST_CARD}"
    assert [kind for kind, _ in found(text)] == ["password", "openai_key", "card"]


def test_sealed_material_is_left_alone() -> None:
    token = "sv1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA"
    text = (
        "password={{secret:inbound.slack.c0.password.v1}} "
        "secret: {{secret:A:" + token + "}} token=" + token
    )
    assert found(text) == []


def test_redaction_set_skips_bare_card_numbers() -> None:
    text = f"card {samples.VISA_TEST_CARD} and {samples.OPENAI_KEY}"
    spans = find_sensitive_spans(text, REDACTION_DETECTORS)
    assert [d.type for d in spans] == ["openai_key"]
    assert len(find_sensitive_spans(text, ALL_DETECTORS)) == 2


def test_non_ascii_case_folding_does_not_shift_offsets() -> None:
    text = "İİİ password=hunter22"  # "İ".lower() is two code points
    assert found(text) == [("password", "hunter22")]


def test_empty_text() -> None:
    assert find_sensitive_spans("") == []
