"""A reply is split once, by the limits its platform's adapter declares."""

from __future__ import annotations

import pytest

from soulflow.channels.base import ChannelLimits
from soulflow.channels.splitting import split_reply, split_text

TELEGRAM = ChannelLimits(max_text=4096, chunk_size=4000, file_fallback_threshold=14_000)
DISCORD = ChannelLimits(max_text=2000, chunk_size=1900, file_fallback_threshold=14_000)


def test_short_text_is_one_part() -> None:
    assert [p.text for p in split_reply("hello", TELEGRAM)] == ["hello"]


def test_split_prefers_paragraphs_then_lines_then_spaces() -> None:
    text = "a" * 50 + "\n\n" + "b" * 50 + "\n" + "c" * 30
    assert split_text(text, 60) == ["a" * 50, "b" * 50, "c" * 30]
    words = " ".join(["word"] * 100)
    assert all(len(p) <= 30 and not p.startswith(" ") for p in split_text(words, 30))
    assert split_text("x" * 95, 30) == ["x" * 30, "x" * 30, "x" * 30, "x" * 5]


@pytest.mark.parametrize("limits", [TELEGRAM, DISCORD])
def test_10k_reply_is_numbered_in_order_under_the_limit(limits: ChannelLimits) -> None:
    lines = [f"line {i:05d} " + "text " * 10 for i in range(180)]
    text = "\n".join(lines)
    assert 9_000 < len(text) < 14_000
    parts = split_reply(text, limits)
    total = len(parts)
    assert total > 1
    for index, part in enumerate(parts, 1):
        assert part.text.startswith(f"[{index}/{total}] ")
        assert len(part.text) <= limits.max_text
    rebuilt = "\n".join(p.text.split(" ", 1)[1] for p in parts)
    assert [ln.rstrip() for ln in rebuilt.splitlines() if ln] == [ln.rstrip() for ln in lines]


def test_code_fences_are_closed_and_reopened_across_chunks() -> None:
    text = "```\n" + "\n".join(f"code {i}" for i in range(600)) + "\n```"
    parts = split_reply(text, DISCORD)
    assert len(parts) > 1
    assert all(p.text.count("```") % 2 == 0 for p in parts)


def test_very_long_reply_becomes_a_file() -> None:
    parts = split_reply("z" * 30_000, TELEGRAM)
    assert len(parts) == 1 and parts[0].options.as_file
    assert parts[0].options.filename == "reply.txt"
    assert "30,000 characters" in parts[0].options.note
    assert parts[0].text == "z" * 30_000


def test_a_platform_that_counts_otherwise_gets_parts_that_fit_its_measure() -> None:
    """Telegram counts UTF-16 code units: 1,500 emoji and spaces are 4,500 of them in 3,000
    characters, under the limit by count and over it by Telegram's measure."""
    def utf16(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    limits = ChannelLimits(max_text=4096, chunk_size=4000, measure=utf16)
    emoji = "😀 " * 1500
    parts = split_reply(emoji, limits)
    assert len(parts) == 2 and all(utf16(p.text) <= 4096 for p in parts)
    assert " ".join(p.text for p in parts).split() == emoji.split()
    assert [p.text for p in split_reply(emoji, TELEGRAM)] == [emoji]  # counted in characters
