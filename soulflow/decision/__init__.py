"""SoulFlow decision."""
