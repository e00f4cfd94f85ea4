"""SoulFlow session."""
