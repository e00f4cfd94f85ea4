"""SoulFlow storage."""
