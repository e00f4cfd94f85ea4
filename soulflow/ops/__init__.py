"""SoulFlow ops: the daemon's health reading, watchdog and notices.

* `service` - `OpsRuntimeService`, the supervised `ops` loop and `/api/state`'s `ops`.
* `watchdog` - stuck agent runs and stalled channel loops, restarted with a reason.
* `notices` - problems that last, told to the notice chat, rate-limited.

See docs/operations.md, "Ops".
"""

from soulflow.ops.notices import NoticeBoard, Problem
from soulflow.ops.service import OpsPolicy, OpsProbes, OpsRuntimeService
from soulflow.ops.watchdog import Action, ChannelWatch, RunWatch, WatchLog

__all__ = [
    "Action",
    "ChannelWatch",
    "NoticeBoard",
    "OpsPolicy",
    "OpsProbes",
    "OpsRuntimeService",
    "Problem",
    "RunWatch",
    "WatchLog",
]
