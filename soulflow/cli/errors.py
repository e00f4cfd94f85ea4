"""The command line's errors: `UserError`, a problem the user can fix, printed by `main` as
one sentence with exit status 1. A daemon that cannot be reached (`client.DaemonNotRunning`)
and a cron command the daemon or the store refused (`cron.CronCommandError`) are ones too.

Its own module, so the commands (which never import `main`) can raise it.
"""

from __future__ import annotations

from soulflow.errors import SoulFlowError

__all__ = ["UserError"]


class UserError(SoulFlowError):
    """A problem the user can fix; printed as one sentence."""
