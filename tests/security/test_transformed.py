"""Transformed forms of a secret in tool output: reversed, hex, base64, URL-encoded, split by
whitespace, other letter case - each found and blanked; ordinary output left alone."""

from __future__ import annotations

import base64
import textwrap
from urllib.parse import quote, quote_plus

import pytest

from soulflow.security.redact import Redactor
from soulflow.security.resolve import mask_tool_output
from soulflow.security.syntax import REDACTED
from soulflow.security.transformed import TransformedSecrets, transformed_forms
from tests.security.readable import readable_forms

VALUE = "Tiger/Lily+7&pw=Q!x@9"  # reserved characters, so URL-encoding changes it
DATA = VALUE.encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def leaks(text: str) -> list[str]:
    return readable_forms(text, VALUE)


CASES = {
    "rev": f"{VALUE[::-1]}\n[exit code: 0]",
    "base64 of the value and a newline (echo | base64)": b64(DATA + b"\n"),
    "base64 -w0 inside JSON": '{"auth": "' + b64(DATA) + '"}',
    "base64, value after 1 byte": "blob " + b64(b"x" + DATA + b"tail") + " end",
    "base64, value after 2 bytes": b64(b"xy" + DATA + b"tail"),
    "url-safe base64 without padding": base64.urlsafe_b64encode(b"xy" + DATA).decode().rstrip("="),
    "base64 wrapped at 76": "\n".join(textwrap.wrap(b64(b"A" * 50 + DATA + b"B" * 40), 76)),
    "xxd -p (wrapped at 60)": "\n".join(textwrap.wrap((b"z" * 25 + DATA).hex(), 60)),
    "hex upper": "digest " + DATA.hex().upper(),
    "od -An -tx1": "\n".join(" " + " ".join(f"{b:02x}" for b in DATA[i:i + 16])
                             for i in range(0, len(DATA), 16)),
    "quote(safe='')": quote(VALUE, safe=""),
    "quote() keeping /": "https://example.test/login?pw=" + quote(VALUE) + "&next=%2F",
    "quote_plus in a query": "GET /?a=1&pw=" + quote_plus(VALUE) + " HTTP/1.1",
    "every byte percent-encoded": "".join(f"%{b:02X}" for b in DATA),
    "every byte, lower-case hex": "".join(f"%{b:02x}" for b in DATA),
    "encodeURIComponent": quote(VALUE, safe="!'()*"),
    "upper-cased (tr a-z A-Z)": VALUE.upper(),
    "one character per line (fold -w1)": "\n".join(VALUE),
}


@pytest.mark.parametrize("text", CASES.values(), ids=list(CASES))
def test_each_transformed_form_is_blanked(text: str) -> None:
    assert leaks(text) != []  # the case does show the value
    masked = TransformedSecrets({"PW": VALUE}).mask(text)
    assert leaks(masked) == [], masked
    assert "[REDACTED: " in masked and "secret PW]" in masked


def test_the_replacement_names_the_secret_and_the_form_never_a_reference() -> None:
    masked = TransformedSecrets({"PW": VALUE}).mask(f"a {VALUE[::-1]} b {DATA.hex()} c")
    assert masked == "a [REDACTED: reversed secret PW] b [REDACTED: hex secret PW] c"
    assert "{{secret:" not in masked  # a reference copied into a call would open the value
    assert TransformedSecrets([VALUE]).mask(f"a {VALUE[::-1]} b") == f"a {REDACTED} b"


def test_a_base64_hit_blanks_its_whole_run_and_nothing_around_it() -> None:
    blob = b64(b"header-bytes" + DATA + b"trailing-bytes")
    masked = TransformedSecrets({"PW": VALUE}).mask(f"before\n{blob}\nafter")
    assert masked == "before\n[REDACTED: base64 secret PW]\nafter"


def test_a_split_value_is_blanked_with_the_whitespace_inside_it() -> None:
    text = "one two\n" + VALUE[:9] + "\n" + VALUE[9:] + "\nthree"
    assert TransformedSecrets({"PW": VALUE}).mask(text) == (
        "one two\n[REDACTED: reformatted secret PW]\nthree")


@pytest.mark.parametrize("pad", [0, 1, 4070, 4085, 4095, 4096, 12_280, 12_300])
def test_a_split_hit_far_into_a_long_output_is_placed_exactly(pad: int) -> None:
    """Anywhere in a 50 KB output, across the boundaries the position map works in."""
    prefix = ("x" * 7 + " ") * (pad // 8) + "y" * (pad % 8) + "\n"
    suffix = "\n" + "tail words " * 3000
    wrapped = "\n".join(textwrap.wrap(DATA.hex(), 10))
    masked = TransformedSecrets({"PW": VALUE}).mask(prefix + wrapped + suffix)
    assert masked == prefix + "[REDACTED: hex secret PW]" + suffix


CLEAN = {
    "shell": "total 12\ndrwxr-xr-x 2 root root 4096 Jan  1 src\n-rw-r--r-- 1 root README.md\n",
    "percentages and escapes": "progress 50% done, 100%\nGET /a%20b?q=x%2Fy\n",
    "other base64": b64(b"some other bytes entirely, nothing secret") + "\n",
    "other hex": (b"another value altogether").hex(),
    "json": '{"status": "ok", "items": [1, 2, 3], "token_count": 17}',
}


@pytest.mark.parametrize("text", CLEAN.values(), ids=list(CLEAN))
def test_output_without_the_secret_is_unchanged(text: str) -> None:
    assert TransformedSecrets({"PW": VALUE}).mask(text) == text


def test_short_values_are_found_only_as_printed() -> None:
    """A 4-character PIN: its forms are short, so joining words would find them by chance."""
    pin = TransformedSecrets({"PIN": "4071"})
    assert pin.mask("code 1704 here") == "code [REDACTED: reversed secret PIN] here"
    assert pin.mask(b64(b"4071")) == "[REDACTED: base64 secret PIN]"
    assert pin.mask("17 04\n1\n7\n0\n4") == "17 04\n1\n7\n0\n4"
    assert TransformedSecrets({"X": "abc"}).mask("cba") == "cba"  # below the minimum


def test_skip_leaves_those_values_to_someone_else() -> None:
    other = "Second-Secret-Value-42"
    both = TransformedSecrets([VALUE, other])
    text = f"{VALUE[::-1]} {other[::-1]}"
    assert both.mask(text, skip={VALUE}) == f"{VALUE[::-1]} {REDACTED}"


def test_forms_never_include_the_value_twice_and_cover_the_listed_kinds() -> None:
    forms = transformed_forms(VALUE)
    texts = [f.text for f in forms]
    assert len(texts) == len(set(texts))
    assert {f.kind.value for f in forms} == {"reformatted", "reversed", "hex", "base64",
                                            "URL-encoded"}


def test_the_redactor_blanks_transformed_forms_of_every_known_value() -> None:
    redactor = Redactor(["Daemon-Credential-0001"])
    text = "Daemon-Credential-0001"[::-1]
    assert redactor.redact_transformed(text) == REDACTED
    redactor.register(VALUE)  # learned later (a secret opened by a call): forms follow
    assert redactor.redact_transformed(b64(DATA)) == REDACTED
    assert redactor.redact_transformed(b64(DATA), skip={VALUE}) == b64(DATA)
    # the other sinks keep the one-pass exact redaction
    assert redactor.redact(text) == text


def test_mask_tool_output_names_the_calls_secrets_and_blanks_the_redactors() -> None:
    """What the registry does to every output: the call's values back to references, their
    forms named; forms of values the redactor knows (opened by an earlier call) blanked."""
    earlier = "Written-To-A-File-Earlier"
    redactor = Redactor([earlier, VALUE])
    output = f"{VALUE} {VALUE[::-1]} {b64(earlier.encode())}"
    assert mask_tool_output(output, {"PW": VALUE}, redactor) == (
        "{{secret:PW}} [REDACTED: reversed secret PW] [REDACTED]")
    assert mask_tool_output("plain output", {}, None) == "plain output"
