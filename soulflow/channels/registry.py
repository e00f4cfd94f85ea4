"""The set of configured channel adapters, looked up by name."""

from __future__ import annotations

from soulflow.channels.base import ChannelAdapter


class ChannelRegistry:
    def __init__(self) -> None:
        self._adapters: dict[str, ChannelAdapter] = {}

    def register(self, adapter: ChannelAdapter) -> None:
        if adapter.name in self._adapters:
            raise ValueError(f"channel {adapter.name!r} is registered twice")
        self._adapters[adapter.name] = adapter

    def get(self, name: str) -> ChannelAdapter | None:
        return self._adapters.get(name)

    def names(self) -> list[str]:
        return list(self._adapters)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._adapters.values()))
