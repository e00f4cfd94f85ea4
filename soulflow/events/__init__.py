"""Workflow and live events."""
