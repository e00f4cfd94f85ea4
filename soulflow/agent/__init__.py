"""SoulFlow agent."""
