"""Slack: `adapter` (the Web API: sends, reactions, edits, files), `inbound` (Socket Mode
receiver and history poller), `enrich` (sender names, thread context), `format` (mrkdwn,
events, error codes), `probe` (the doctor's token checks)."""
