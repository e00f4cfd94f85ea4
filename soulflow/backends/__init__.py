"""Backends for the bus's durable state: `file` (the embedded default) and `redis` (several
daemons sharing one workload). `base.py` is the contract; `tests/backends/` checks both."""
