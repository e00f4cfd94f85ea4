"""Named providers, so config and commands can refer to a model backend by a short name.

Deliberately small: it looks providers up and closes them; `chain` puts the failover wrapper
(`soulflow.providers.failover`) over them.
"""

from __future__ import annotations

import logging

from soulflow.contracts import Provider, ProviderError
from soulflow.providers.failover import FailoverProvider
from soulflow.providers.stats import MeasuredProvider, ProviderStatsBook

log = logging.getLogger(__name__)


class ProviderRegistry:
    """Holds providers by `name`, remembering registration order and a default."""

    def __init__(self) -> None:
        self._providers: dict[str, Provider] = {}
        self._default: str | None = None
        # latency and errors per provider, fed by the chain's wrappers (dashboard, /metrics)
        self.stats = ProviderStatsBook()

    def register(self, provider: Provider) -> None:
        """Add a provider; a duplicate name is a configuration mistake, so it is refused."""
        if provider.name in self._providers:
            raise ValueError(f"a provider named {provider.name!r} is already registered")
        self._providers[provider.name] = provider

    def get(self, name: str) -> Provider:
        """Return the provider called `name`, or explain which names do exist."""
        try:
            return self._providers[name]
        except KeyError:
            raise ProviderError(
                "not_configured",
                f"no provider named {name!r}; configured: {self._describe_names()}",
            ) from None

    def names(self) -> list[str]:
        """Names in registration order."""
        return list(self._providers)

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def __len__(self) -> int:
        return len(self._providers)

    @property
    def default_name(self) -> str | None:
        """The explicitly chosen default, else the first registered provider, else None."""
        if self._default is not None:
            return self._default
        return next(iter(self._providers), None)

    def set_default(self, name: str) -> None:
        """Choose the default; refuses unknown names so a typo fails at startup, not mid-chat."""
        self.get(name)
        self._default = name

    def chain(self, order: list[str] | None = None, *, cooldown_s: float = 30.0) -> Provider:
        """The provider to chat with: the default one, backed by the others for failover.

        `order` lists the fallbacks to try after the default (default: every other provider in
        registration order); unknown names raise `not_configured`. Build the chain once and keep
        it: the failover wrapper remembers which providers are down. The registry still owns
        (and closes) the providers.
        """
        default = self.default_name
        if default is None:
            raise ProviderError("not_configured", "no model provider is configured")
        names = [default]
        for name in self.names() if order is None else order:
            self.get(name)
            if name not in names:
                names.append(name)
        measured = [MeasuredProvider(self.get(name), self.stats) for name in names]
        if len(measured) == 1:
            return measured[0]
        return FailoverProvider(measured, cooldown_s=cooldown_s)

    async def close(self) -> None:
        """Close every provider; one failing to close must not leak the others' connections."""
        for name, provider in self._providers.items():
            try:
                await provider.close()
            except Exception:
                log.warning("closing provider %r failed", name, exc_info=True)

    def _describe_names(self) -> str:
        return ", ".join(repr(n) for n in self._providers) or "(none)"
