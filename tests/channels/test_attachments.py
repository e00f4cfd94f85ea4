"""Attachments are saved in their chat's zone, and a link planted there is never followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.contracts import Attachment, InboundMessage
from soulflow.conversation.attachments import chat_files, fetchable
from soulflow.security.inbound import InboundSealer
from soulflow.storage.beneath import Beneath, RefusedPath
from tests.vaults import file_vault


async def test_a_file_lands_in_the_chats_zone_by_its_relative_path(tmp_path: Path) -> None:
    folder = chat_files(Beneath(tmp_path), "telegram", "-100200")
    rel = await folder.save("abc_report.txt", b"data")
    assert rel.as_posix() == "chats/telegram--100200/files/abc_report.txt"
    assert (tmp_path / rel).read_bytes() == b"data"
    assert await folder.save("abc_report.txt", b"again") == rel  # the same platform file
    assert (tmp_path / rel).read_bytes() == b"again"


async def test_a_planted_link_is_refused_or_replaced_never_followed(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    folder = chat_files(Beneath(workspace), "slack", "C1")
    zone = workspace / "chats" / "slack-C1"
    zone.mkdir(parents=True)
    (zone / "files").symlink_to(outside)  # the folder itself swapped for a link
    with pytest.raises(RefusedPath, match="link"):
        await folder.save("F1_a.txt", b"data")
    assert list(outside.iterdir()) == []

    (zone / "files").unlink()
    (zone / "files").mkdir()
    target = outside / "victim.txt"
    target.write_text("keep")
    (zone / "files" / "F1_a.txt").symlink_to(target)  # the file's name is a link
    await folder.save("F1_a.txt", b"data")
    assert target.read_text() == "keep"
    assert not (zone / "files" / "F1_a.txt").is_symlink()
    assert (zone / "files" / "F1_a.txt").read_bytes() == b"data"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x"])
async def test_only_plain_names_are_accepted(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="not a plain file name"):
        await chat_files(Beneath(tmp_path), "discord", "1").save(name, b"x")


def test_the_download_gets_the_url_the_inbound_sealer_sealed(tmp_path: Path) -> None:
    """A Discord URL's ids can read as a card number: the journal keeps the sealed URL, the
    download the real one."""
    url = ("https://cdn.example/attachments/1575518171987705856/1575518187754094592/d.txt"
           "?ex=1&hm=2")
    message = InboundMessage(provider="discord", chat_id="1575518171987705856",
                             message_id="1", sender_id="u", text="file",
                             attachments=[Attachment(name="d.txt", url=url)])
    sealer = InboundSealer(file_vault(tmp_path / "security"))
    assert sealer.seal(message).sealed >= 1
    (sealed,) = message.attachments
    assert sealed.url != url and "{{secret:" in (sealed.url or "")
    opened = fetchable(sealed, message, sealer.vault)
    assert opened.url == url and opened.name == "d.txt"
    assert sealed.url != url  # the message itself stays sealed
    assert fetchable(sealed, message, None) is sealed
    elsewhere = InboundMessage(provider="discord", chat_id="99", message_id="2",
                               sender_id="u", text="")
    assert fetchable(sealed, elsewhere, sealer.vault).url == sealed.url  # not its scope
