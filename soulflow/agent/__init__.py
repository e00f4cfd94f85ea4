"""Agent domain: memory, context and replies."""
