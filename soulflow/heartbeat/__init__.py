"""The heartbeat: a periodic, quiet agent turn over the workspace's `HEARTBEAT.md`.

* `checklist` - when a checklist holds work, the prompt, and the `HEARTBEAT_OK` all-clear.
* `targets` - the chat (a `ChatRef`) heartbeat and ops notices go to.
* `turns` - `QuietTurnRunner`: agent turns in their own bounded session that message the
  chat only when there is something to say (also used by `system_event` cron jobs).
* `service` - `HeartbeatService`, the supervised loop.

See docs/operations.md, "Heartbeat".
"""

from soulflow.heartbeat.checklist import OK_TOKEN, actionable_lines, is_ok_reply
from soulflow.heartbeat.service import HEARTBEAT_SESSION, HeartbeatService, TickStatus
from soulflow.heartbeat.targets import notice_target, parse_chat
from soulflow.heartbeat.turns import QuietTurn, QuietTurnRunner, TurnOutcome, TurnStatus

__all__ = [
    "HEARTBEAT_SESSION",
    "OK_TOKEN",
    "HeartbeatService",
    "QuietTurn",
    "QuietTurnRunner",
    "TickStatus",
    "TurnOutcome",
    "TurnStatus",
    "actionable_lines",
    "is_ok_reply",
    "notice_target",
    "parse_chat",
]
