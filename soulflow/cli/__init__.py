"""The `soulflow` command line: one module per command, `main` parses and dispatches.

`main.py` builds the parser and runs a command (`init` and `run` inline); `chat.py`,
`status.py`, `doctor.py`, `dlq.py`, `cron.py` and `secret.py` are the commands with more to
them, `client.py` is how they reach a running daemon over its HTTP API, and `wiring.py` builds
the daemon `run` and an embedded `chat` start: a runtime with its dashboard. The command
modules never import `main`, so the package has no import cycle.
"""
