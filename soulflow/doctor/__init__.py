"""`soulflow doctor`: find what keeps SoulFlow from running, and say how to fix it.

Checks (see `runner.CHECKS`): the workspace and the key/.env permissions, the settings, each
configured channel's token (one real SDK call), each provider (one tiny request), the
embedded model, the code sandbox, the dashboard port and the clock. Each prints one line,
ok / warn / FAIL / skip, with the fix; the exit code is 1 when anything FAILs.

`runner.diagnose` runs them; `model` holds the records a check returns. This file imports
neither, so the checks' modules and the runner can import the package without a cycle.
"""
