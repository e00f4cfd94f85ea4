"""Discord: `adapter` (gateway events, REST sends, catch-up after reconnects), `format`
(events, mentions, errors, downloads), `http` (discord.py's client on this adapter's URLs),
`feedback` (typing, reactions and edits on a client of their own), `probe` (the doctor's
token check)."""
