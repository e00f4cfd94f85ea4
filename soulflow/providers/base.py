"""The provider contract: one chat turn against a model, with streaming and abort.

The records and the `Provider` protocol live in `soulflow.contracts`, so the agent and the
task planner depend on the contract, not on this package; this module keeps the names where
provider implementations know them.
"""

import asyncio
from collections.abc import Callable

from soulflow.contracts import (
    Provider,
    ProviderError,
    ProviderResult,
    StreamCallback,
    ToolCall,
    Usage,
)

__all__ = ["Provider", "ProviderError", "ProviderResult", "StreamCallback", "ToolCall", "Usage",
           "refuse_unstartable_turn"]


def refuse_unstartable_turn(closed: bool, abort: asyncio.Event | None,
                            error: Callable[[str, str], ProviderError]) -> None:
    """The two reasons every provider refuses a turn before sending anything: it was closed
    (`not_configured`), or the user already stopped the run (`aborted`)."""
    if closed:
        raise error("not_configured", "the provider has been closed")
    if abort is not None and abort.is_set():
        raise error("aborted", "the request was aborted before it was sent")
