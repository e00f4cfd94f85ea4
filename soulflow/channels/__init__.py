"""Channel adapters and the inbound pipeline."""
