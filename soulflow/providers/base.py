"""The provider contract: one chat turn against a model, with streaming and abort.

The records and the `Provider` protocol live in `soulflow.contracts`, so the agent and the
task planner depend on the contract, not on this package; this module keeps the names where
provider implementations know them.
"""

from soulflow.contracts import (
    Provider,
    ProviderError,
    ProviderResult,
    StreamCallback,
    ToolCall,
    Usage,
)

__all__ = ["Provider", "ProviderError", "ProviderResult", "StreamCallback", "ToolCall", "Usage"]
