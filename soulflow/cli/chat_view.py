"""How `soulflow chat` prints the replies of a local chat, streamed ones included.

A streamed reply arrives as one message and then edits of it (channels/local/edits.py). A
terminal cannot rewrite what it printed, so: the line of the last reply printed stays open,
and an edit that extends what was printed for its message prints only the new text (on that
line while it is still the last thing printed, else on a line starting with "…"); an edit
that changes what was printed prints the whole new text, marked "(corrected)". An ordinary
reply prints as it always did: `soulflow> text` at a prompt, the bare text when scripted.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, TextIO

# messages whose printed text is remembered for their edits; a stream edits its own message
# only, so a few are plenty, and the chat may run for days
_KEPT = 256
CONTINUED = "…"
CORRECTED = "(corrected) "


class ChatPrinter:
    def __init__(self, out: TextIO, *, interactive: bool) -> None:
        self._out = out
        self._interactive = interactive
        self._printed: OrderedDict[str, str] = OrderedDict()  # message id -> text shown
        self._open: str | None = None  # the message whose line is not ended yet

    def show(self, entry: dict[str, Any]) -> None:
        """Print one transcript entry (the terminal shows the assistant's side only)."""
        if entry.get("role") != "assistant":
            return
        content = str(entry.get("content", ""))
        edits = entry.get("edits")
        key = edits if isinstance(edits, str) and edits else str(entry.get("id", ""))
        before = self._printed.get(key)
        if before is None:  # a new message (or an edit of one this terminal never showed)
            self._start_line("")
            self._out.write(content)
        elif content == before:
            return
        elif content.startswith(before):
            delta = content[len(before):]
            if self._open != key:
                self._start_line(CONTINUED)
            self._out.write(delta)
        else:
            self._start_line(CORRECTED)
            self._out.write(content)
        self._open = key
        self._printed[key] = content
        self._printed.move_to_end(key)
        while len(self._printed) > _KEPT:
            self._printed.popitem(last=False)
        self._out.flush()

    def end_line(self) -> None:
        """End the open line (before a prompt, an error, or the end of the chat)."""
        if self._open is not None:
            self._out.write("\n")
            self._out.flush()
            self._open = None

    def _start_line(self, mark: str) -> None:
        """A new line: `soulflow> ` at a prompt; then the mark (a correction's at the prompt,
        `soulflow (corrected)> `)."""
        self.end_line()
        if not self._interactive:
            self._out.write(mark)
        elif mark == CORRECTED:
            self._out.write(f"soulflow {CORRECTED.strip()}> ")
        else:
            self._out.write(f"soulflow> {mark}")
