"""SoulFlow dashboard."""
