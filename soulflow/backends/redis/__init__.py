"""The Redis backend (redis-py's asyncio client): streams with a consumer group for inbound
work, partition and account leases with fencing tokens, outbox, DLQs and cursors.
See docs/scaling.md for the design."""
