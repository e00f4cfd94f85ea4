"""SoulFlow: a self-hosted chat-agent daemon."""

__version__ = "0.1.0"
