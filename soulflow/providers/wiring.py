"""Build the provider registry from settings (only providers that are configured)."""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Any

from soulflow.config import ConfigError, Settings, id_list
from soulflow.providers.cli import HeadlessCliProvider
from soulflow.providers.local_runtime import (
    DEFAULT_THREADS,
    LocalModelConfig,
    LocalModelRuntime,
    local_model_available,
)
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.registry import ProviderRegistry

CLI_PROVIDERS = {"chatgpt": "CODEX_COMMAND", "claude_code": "CLAUDE_COMMAND"}

log = logging.getLogger(__name__)


def build_providers(settings: Settings,
                    local: LocalModelRuntime | None = None) -> ProviderRegistry:
    """`local`: the embedded model (see `embedded_model`), registered as phi4_local."""
    registry = ProviderRegistry()
    common = {
        "timeout_s": float(settings["PROVIDER_TIMEOUT_S"]),
        "max_retries": int(settings["PROVIDER_MAX_RETRIES"]),
        "retry_base_delay_s": settings.seconds_from_ms("PROVIDER_RETRY_BASE_MS"),
    }
    wanted = [settings["PROVIDER"], *id_list(settings["PROVIDER_FALLBACKS"])]
    for config in endpoint_configs(settings, **common):
        registry.register(OpenAICompatibleProvider(config))
    if not settings["PHI4_BASE_URL"] and local is not None:
        registry.register(OpenAICompatibleProvider(OpenAICompatibleConfig(
            name="phi4_local", base_url=local.base_url, model=local.model, **common)))
    for name, command_setting in CLI_PROVIDERS.items():
        if name in wanted:
            registry.register(HeadlessCliProvider(
                name, shlex.split(settings[command_setting]), cwd=settings.workspace,
                timeout_s=float(settings["CLI_PROVIDER_TIMEOUT_S"])))
    if settings["PROVIDER"]:
        registry.set_default(settings["PROVIDER"])
    return registry


def endpoint_configs(settings: Settings, **common: Any) -> list[OpenAICompatibleConfig]:
    """The OpenAI-compatible endpoints the settings configure (OpenRouter, a PHI4_BASE_URL
    server), with `common` options: the daemon's providers and `soulflow doctor`'s pings are
    built from this one list, so the doctor asks exactly what the daemon would."""
    configs = []
    if settings["OPENROUTER_API_KEY"]:
        configs.append(OpenAICompatibleConfig(
            name="openrouter", base_url=settings["OPENROUTER_BASE_URL"],
            model=settings["OPENROUTER_MODEL"], api_key=settings["OPENROUTER_API_KEY"],
            extra_headers={"X-Title": "SoulFlow"}, **common))
    if settings["PHI4_BASE_URL"]:
        configs.append(OpenAICompatibleConfig(
            name="phi4_local", base_url=settings["PHI4_BASE_URL"].rstrip("/"),
            model=settings["PHI4_MODEL"], **common))
    return configs


def configured_provider_names(settings: Settings) -> list[str]:
    """The providers the settings give the daemon (the embedded model counted when it is
    wanted; whether it can run is the local model's own check): empty means none configured."""
    named = [settings["PROVIDER"], *id_list(settings["PROVIDER_FALLBACKS"])]
    names = [config.name for config in endpoint_configs(settings)]
    names += [name for name in CLI_PROVIDERS if name in named]
    if wants_embedded_model(settings) and "phi4_local" not in names:
        names.append("phi4_local")
    return names


def failover_order(settings: Settings) -> list[str] | None:
    """The fallbacks after the default provider, or None for every other configured one."""
    fallbacks = id_list(settings["PROVIDER_FALLBACKS"])
    return fallbacks or None


def wants_embedded_model(settings: Settings) -> bool:
    """LOCAL_MODEL=on, or auto with no other provider configured (or phi4_local named without
    a PHI4_BASE_URL): a fresh install chats with no API key."""
    mode = settings["LOCAL_MODEL"]
    if mode == "off" or settings["PHI4_BASE_URL"]:
        return False
    named = [settings["PROVIDER"], *id_list(settings["PROVIDER_FALLBACKS"])]
    if mode == "on" or "phi4_local" in named:
        return True
    return not settings["OPENROUTER_API_KEY"] and not any(n in CLI_PROVIDERS for n in named)


def local_model_config(settings: Settings) -> LocalModelConfig:
    command = settings["LOCAL_MODEL_COMMAND"]
    return LocalModelConfig(
        python=settings["LOCAL_MODEL_PYTHON"] or sys.executable,
        model_path=settings["LOCAL_MODEL_PATH"] or None,
        server_command=shlex.split(command) if command else None,
        port=settings["LOCAL_MODEL_PORT"], n_ctx=settings["LOCAL_MODEL_CTX"],
        n_threads=settings["LOCAL_MODEL_THREADS"] or DEFAULT_THREADS,
        chat_format=settings["LOCAL_MODEL_CHAT_FORMAT"] or None,
        model_alias=settings["LOCAL_MODEL_NAME"],
        startup_timeout_s=settings["LOCAL_MODEL_STARTUP_TIMEOUT_S"])


def embedded_model(settings: Settings) -> LocalModelRuntime | None:
    """The embedded model's runtime when it is wanted and installed (not started yet)."""
    if not wants_embedded_model(settings):
        return None
    config = local_model_config(settings)
    reason = None if config.server_command else local_model_available(config.python)
    if reason is None:
        return LocalModelRuntime(config, settings.runtime_dir)
    if settings["LOCAL_MODEL"] == "on" or settings["PROVIDER"] == "phi4_local":
        raise ConfigError(f"the embedded model cannot run: {reason}")
    log.warning("no model provider is configured and the embedded model cannot run: %s", reason)
    return None
