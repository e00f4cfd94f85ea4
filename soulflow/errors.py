"""The root of SoulFlow's own exceptions, and the errors every layer may catch by type.

`SoulFlowError` is the one base: code that must tell "SoulFlow refused or failed on purpose"
from a bug catches it. Each area hangs its exceptions under it; foreign errors (a Redis client's,
a platform SDK's) are mapped to one of these where they enter, so no layer above the one that
talks to the foreign library ever names its exception types.

Like `contracts`, this module imports nothing of soulflow: every layer may import it.
"""

from __future__ import annotations

__all__ = ["SoulFlowError", "StoreError", "StoreUnavailable"]


class SoulFlowError(Exception):
    """Base of every exception SoulFlow raises on purpose."""


class StoreError(SoulFlowError):
    """A store refused a request (Redis answered with an error: a bug, or a Redis that cannot
    run it). Raised by the Redis stores for every Redis error that is not the store being
    away; the file stores raise `OSError` as the files do."""


class StoreUnavailable(StoreError):
    """The shared store did not answer: a connection failure, a timeout, a Redis still
    loading its data, or the client's breaker failing fast after one of those. Nothing was
    written (or it is unknown whether it was); the same request may succeed once the store
    answers again, so a turn that fails with it is given back to run again, never
    quarantined. The file stores never raise it: a file that cannot be written is a real
    failure."""
