"""The inbound security step: everything a message carries is sealed before it is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.file.vault import FileSecretEntries
from soulflow.contracts import Attachment, InboundMessage
from soulflow.security.inbound import InboundSealer
from soulflow.security.vault import SECRETS_FILE, SecretVault
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


async def test_only_what_holds_something_to_seal_goes_where_the_vault_waits(
        tmp_path: Path) -> None:
    """`seal_off_loop` hands the vault work to the backend's offload (the store thread on
    Redis) only for a message with something to store; the others are scanned and passed."""
    offloaded: list[str] = []

    async def offload(call: Any, /, *args: Any, **kwargs: Any) -> Any:
        offloaded.append(args[0].message_id if args else call.__name__)
        return call(*args, **kwargs)

    vault = SecretVault(tmp_path / "security", entries=FileSecretEntries(
        tmp_path / "security" / SECRETS_FILE), offload=offload)
    sealer = InboundSealer(vault)
    plain = message("order 1234567812345678 ships today; password=ab")
    plain.message_id = "plain"
    carrying = message(f"key: {OPENAI_KEY}")
    carrying.message_id = "carrying"
    setting = message("/secret set deploy_key hunter22-value", is_direct=True)
    setting.message_id = "setting"
    in_context = message("see above", thread_context=(f"token: {OPENAI_KEY}",))
    in_context.message_id = "context"
    for msg in (plain, carrying, setting, in_context):
        await sealer.seal_off_loop(msg)
    assert offloaded == ["carrying", "setting", "context"]
    assert plain.text == "order 1234567812345678 ships today; password=ab"
    assert OPENAI_KEY not in repr((carrying, in_context))
    assert setting.text == "/secret set deploy_key {{secret:deploy_key}}"
    assert vault.get("deploy_key") == "hunter22-value"
