"""How a reply's parts edit what its stream left in the chat (replies.over_shown)."""

from __future__ import annotations

from soulflow.channels.splitting import ReplyPart
from soulflow.contracts import ReplyOptions
from soulflow.conversation.replies import LEFT_OVER_PIECE, over_shown
from soulflow.conversation.streaming import ShownPieces


def test_without_a_stream_the_parts_are_sent_as_they_are() -> None:
    parts = [ReplyPart("a"), ReplyPart("b")]
    assert over_shown(parts, ShownPieces()) == parts


def test_each_part_edits_the_next_piece_and_the_rest_are_new_messages() -> None:
    parts = [ReplyPart("[1/3] a"), ReplyPart("[2/3] b"), ReplyPart("[3/3] c")]
    result = over_shown(parts, ShownPieces(("m1", "m2"), ("a", "")))
    assert [(p.text, p.options.edit_of, p.options.shown) for p in result] == [
        ("[1/3] a", "m1", False), ("[2/3] b", "m2", False), ("[3/3] c", "", False)]


def test_a_part_the_chat_already_shows_is_marked_shown() -> None:
    result = over_shown([ReplyPart("the whole answer")],
                        ShownPieces(("m1",), ("the whole answer",)))
    assert result[0].options == ReplyOptions(edit_of="m1", shown=True)


def test_pieces_no_part_reaches_are_emptied_and_a_file_goes_as_a_new_message() -> None:
    file_part = ReplyPart("x" * 100, ReplyOptions(as_file=True, filename="reply.txt"))
    result = over_shown([file_part], ShownPieces(("m1", "m2"), ("x", "y")))
    assert result[0] == file_part
    assert [(p.text, p.options.edit_of) for p in result[1:]] == [
        (LEFT_OVER_PIECE, "m1"), (LEFT_OVER_PIECE, "m2")]
