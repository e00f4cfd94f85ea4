"""SoulFlow events."""
