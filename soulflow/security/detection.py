"""What a detector reports, and what a detector is: shared by `detectors` and the detectors
that live in their own modules (`platform_tokens`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Detection:
    """A sensitive value at ``text[start:end]``; ``type`` names what kind (``password``...)."""

    type: str
    start: int
    end: int


class Detector(Protocol):
    """Anything that can find candidate spans; overlap resolution happens in one place.

    ``lowered`` is ``text.lower()``, computed once per text and shared by all detectors.
    """

    @property
    def name(self) -> str: ...

    def scan(self, text: str, lowered: str) -> Iterator[Detection]: ...
