"""Build the provider registry from settings (only providers that are configured)."""

from __future__ import annotations

import shlex

from soulflow.config import Settings, id_list
from soulflow.providers.cli import HeadlessCliProvider
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.registry import ProviderRegistry

CLI_PROVIDERS = {"chatgpt": "CODEX_COMMAND", "claude_code": "CLAUDE_COMMAND"}


def build_providers(settings: Settings) -> ProviderRegistry:
    registry = ProviderRegistry()
    common = {
        "timeout_s": float(settings["PROVIDER_TIMEOUT_S"]),
        "max_retries": int(settings["PROVIDER_MAX_RETRIES"]),
        "retry_base_delay_s": settings.seconds_from_ms("PROVIDER_RETRY_BASE_MS"),
    }
    wanted = [settings["PROVIDER"], *id_list(settings["PROVIDER_FALLBACKS"])]
    if settings["OPENROUTER_API_KEY"]:
        registry.register(OpenAICompatibleProvider(OpenAICompatibleConfig(
            name="openrouter", base_url=settings["OPENROUTER_BASE_URL"],
            model=settings["OPENROUTER_MODEL"], api_key=settings["OPENROUTER_API_KEY"],
            extra_headers={"X-Title": "SoulFlow"}, **common)))
    if settings["PHI4_BASE_URL"]:
        registry.register(OpenAICompatibleProvider(OpenAICompatibleConfig(
            name="phi4_local", base_url=settings["PHI4_BASE_URL"].rstrip("/"),
            model=settings["PHI4_MODEL"], **common)))
    for name, command_setting in CLI_PROVIDERS.items():
        if name in wanted:
            registry.register(HeadlessCliProvider(
                name, shlex.split(settings[command_setting]), cwd=settings.workspace,
                timeout_s=float(settings["CLI_PROVIDER_TIMEOUT_S"])))
    if settings["PROVIDER"]:
        registry.set_default(settings["PROVIDER"])
    return registry


def failover_order(settings: Settings) -> list[str] | None:
    """The fallbacks after the default provider, or None for every other configured one."""
    fallbacks = id_list(settings["PROVIDER_FALLBACKS"])
    return fallbacks or None
