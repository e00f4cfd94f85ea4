"""SoulFlow providers."""
