"""The local channel: the operator's own chat (`soulflow chat`, the dashboard), one transcript
file per chat (`adapter`)."""
