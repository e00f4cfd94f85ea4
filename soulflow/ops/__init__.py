"""SoulFlow ops."""
