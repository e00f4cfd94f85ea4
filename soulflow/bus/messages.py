"""Records that travel through the bus: what came in, what goes out, how a send ended.

They live in `soulflow.contracts` (the bottom of the import graph, so stores and the agent can
use them without importing the bus); this module keeps the names where callers know them.
"""

from soulflow.contracts import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    SendError,
    SendResult,
    new_id,
)

__all__ = ["Attachment", "InboundMessage", "OutboundMessage", "SendError", "SendResult", "new_id"]
