"""One daemon's services, built in boot order, each started with its stop on one exit stack.

* `daemon` - `Runtime` (lifecycle), `create_runtime`, `read_daemon_info`.
* `status` - what the daemon reports about itself: `/api/state`, problems, queue depths.
* `view` - `DaemonView`, what the dashboard reads of a running daemon.
* `wiring` - settings turned into the parts (retry policy, tools, channels, conversation, agent
  loop), one function each, so `Runtime.__init__` reads as the boot order.
* `tool_bridge` - what a tool call may reach of the daemon (send, request a file, spawn,
  schedule), bound to the run's chat.
"""

from soulflow.runtime.daemon import (
    DAEMON_INFO_FILE,
    FrontEnd,
    Runtime,
    create_runtime,
    read_daemon_info,
)

__all__ = ["DAEMON_INFO_FILE", "FrontEnd", "Runtime", "create_runtime", "read_daemon_info"]
