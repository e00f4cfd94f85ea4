"""SoulFlow security."""
