"""Discord readiness: the client is ready once the guilds READY announced have arrived."""

from __future__ import annotations

from typing import Any

GUILDS_SETTLED_S = 0.01  # the wait for one more GUILD_CREATE once all announced have come


class ExpectedGuilds:
    """Ends discord.py's wait for guilds as soon as the last one READY announced arrives.

    READY lists every guild of the bot as unavailable; each then arrives in a GUILD_CREATE.
    discord.py does not count them: it fires `on_ready` once no GUILD_CREATE came for
    `guild_ready_timeout` (2 s by default), so every start kept the first messages waiting
    that long (the adapter reads once ready). This wraps the client's READY and GUILD_CREATE
    parsers: READY records the guild ids it announces, each GUILD_CREATE ticks one off, and
    when none is left the client's `guild_ready_timeout` drops to GUILDS_SETTLED_S, which
    discord.py reads before waiting for the next one. A guild that never comes (Discord has
    it unavailable) still ends the wait after the full `guild_ready_timeout`. Messages are
    classified from the event's own guild id (`guild_id_of`), never from this cache.
    """

    def __init__(self, state: Any, guild_ready_timeout: float) -> None:
        self._state = state
        self._timeout = guild_ready_timeout
        self.waiting: set[int] = set()
        parsers = state.parsers
        self._parse_ready, self._parse_guild_create = parsers["READY"], parsers["GUILD_CREATE"]
        parsers["READY"], parsers["GUILD_CREATE"] = self._ready, self._guild_create

    def _ready(self, data: Any) -> None:
        guilds = data.get("guilds") if isinstance(data, dict) else None
        self.waiting = {int(g["id"]) for g in guilds or []
                        if isinstance(g, dict) and str(g.get("id", "")).isdigit()}
        self._state.guild_ready_timeout = self._timeout if self.waiting else GUILDS_SETTLED_S
        self._parse_ready(data)

    def _guild_create(self, data: Any) -> None:
        self._parse_guild_create(data)
        guild_id = data.get("id") if isinstance(data, dict) else None
        if self.waiting and str(guild_id).isdigit() and not data.get("unavailable"):
            self.waiting.discard(int(str(guild_id)))
            if not self.waiting:
                self._state.guild_ready_timeout = GUILDS_SETTLED_S
