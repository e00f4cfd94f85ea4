"""The inbound security step: everything a message carries is sealed before it is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.contracts import Attachment, InboundMessage
from soulflow.security.inbound import InboundSealer
from tests.security.samples import OPENAI_KEY
from tests.vaults import file_vault


@pytest.fixture
def sealer(tmp_path: Path) -> InboundSealer:
    return InboundSealer(file_vault(tmp_path / "security"))


def message(text: str, **kwargs: object) -> InboundMessage:
    return InboundMessage(provider="telegram", chat_id="42", message_id="7", sender_id="u",
                          text=text, **kwargs)  # type: ignore[arg-type]


def test_text_thread_context_and_attachments_are_sealed(sealer: InboundSealer) -> None:
    msg = message(f"password=Tr0ub4dor&3 and {OPENAI_KEY}",
                  thread_context=(f"earlier: token: {OPENAI_KEY}",),
                  attachments=[Attachment(name=f"{OPENAI_KEY}.txt", url="https://x/f")])
    report = sealer.seal(msg)
    assert report.sealed >= 4
    blob = repr(msg)
    assert "Tr0ub4dor&3" not in blob and OPENAI_KEY not in blob
    assert "{{secret:inbound.telegram.c" in msg.text
    names = sealer.vault.names()
    assert any(".password." in n for n in names)
    password_name = next(n for n in names if ".password." in n)
    assert sealer.vault.get(password_name) == "Tr0ub4dor&3"


def test_secret_set_command_stores_under_the_given_name(sealer: InboundSealer) -> None:
    msg = message("/secret set deploy_key hunter22-value", is_direct=True)
    report = sealer.seal(msg)
    assert report.stored_name == "deploy_key"
    assert msg.text == "/secret set deploy_key {{secret:deploy_key}}"
    assert sealer.vault.get("deploy_key") == "hunter22-value"


def test_plain_text_is_untouched(sealer: InboundSealer) -> None:
    msg = message("order 1234567812345678 ships today; password=ab")
    assert sealer.seal(msg).sealed == 0
    assert msg.text == "order 1234567812345678 ships today; password=ab"
