"""SoulFlow channels."""
