"""`soulflow status` shows what the chat folders hold and their quotas (from `/api/state`'s
``disk``, the usage index: no folder is walked for it)."""

from __future__ import annotations

import pytest

from soulflow.cli.status import _print_disk
from soulflow.security.quota import QuotaLimits, UsageIndex, ZoneQuotas
from soulflow.storage.tree_usage import Usage


def test_status_prints_the_chat_folders_and_their_quotas(
        capsys: pytest.CaptureFixture[str]) -> None:
    index = UsageIndex()
    index.put("telegram-42", Usage(3 * 1024 * 1024, 12))
    index.put("slack-C9", Usage(2048, 3))
    limits = QuotaLimits(chat_bytes=256 << 20, chat_files=20000, exec_bytes=128 << 20,
                         exec_files=5000)
    _print_disk(ZoneQuotas(limits, index).summary())
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("  disk       2 chat folder(s) hold 3.0 MB in 15 files and folders; "
                      "quota per chat 256.0 MB / 20000, per exec call 128.0 MB / 5000")
    assert out[1].split() == ["telegram-42", "3.0", "MB", "12", "files"]
    assert out[2].split() == ["slack-C9", "2.0", "KB", "3", "files"]


def test_nothing_is_printed_without_the_section(capsys: pytest.CaptureFixture[str]) -> None:
    _print_disk({})
    assert capsys.readouterr().out == ""
