"""The base of the dashboard's errors, `DashboardError`, which is also what a dashboard that
cannot start raises (`soulflow run` prints it as one sentence and exits 1).

Under it: a request the API will not serve (`guard.Refused`) and an action that cannot be
done as asked (`actions.ActionError`); both carry the HTTP status they are answered with and
never leave the request they belong to.
"""

from __future__ import annotations

from soulflow.errors import SoulFlowError

__all__ = ["DashboardError"]


class DashboardError(SoulFlowError):
    """The dashboard could not start (port in use, address not available), or refused a
    request (the subclasses)."""
