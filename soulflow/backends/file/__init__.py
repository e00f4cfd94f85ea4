"""The file backend: every store in files under the workspace's `runtime/`, one module per
store; `backend.py` builds them (`FileBackend`)."""
