"""Conversation sessions stored as JSONL files."""
