"""Decisions store."""
