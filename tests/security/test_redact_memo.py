"""`Redactor.redact_strings` remembers clean strings (journals and model requests repeat the
same history every turn): the memo must never change what is redacted."""

from __future__ import annotations

from soulflow.security.redact import REDACTED, Redactor

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def test_repeated_history_is_redacted_the_same_every_time() -> None:
    redactor = Redactor()
    history = [{"role": "user", "content": f"my token is {TOKEN}"},
               {"role": "assistant", "content": "noted"}]
    first = redactor.redact_strings(history)
    second = redactor.redact_strings(history)
    assert first == second
    assert TOKEN not in str(second)
    assert second[1] == {"role": "assistant", "content": "noted"}


def test_a_value_registered_later_is_redacted_in_a_string_seen_clean_before() -> None:
    redactor = Redactor()
    text = "the door code is hunter-two-2024"
    assert redactor.redact_strings([text]) == [text]  # clean so far, and remembered
    redactor.register("hunter-two-2024")
    assert redactor.redact_strings([text]) == [f"the door code is {REDACTED}"]


def test_only_clean_strings_are_remembered() -> None:
    redactor = Redactor(["s3cret-value"])
    redactor.redact_strings({"a": "s3cret-value here", "b": "plain"})
    assert not redactor._clean.has("s3cret-value here")
    assert redactor._clean.has("plain")


def test_the_memo_is_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("soulflow.security.redact.CLEAN_MEMO_CHARS", 200)
    redactor = Redactor()
    for n in range(50):
        assert redactor.redact_strings(f"plain text number {n:04d}") == \
            f"plain text number {n:04d}"
    assert redactor._clean._chars <= 200
    assert redactor._clean.has("plain text number 0049")
