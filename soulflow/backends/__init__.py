"""The store port: every store the daemon uses, from one backend. `base.py` declares the
protocols; `file/` (the embedded default) and `redis/` (several daemons sharing one workload)
implement them; `wiring.py` picks one from the settings. `tests/backends/` checks both."""
