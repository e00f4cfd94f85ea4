"""Settings from the environment and `<workspace>/.env`, validated once at boot.

Every setting is declared once in `SETTINGS` (`catalog.py`: name, parser, default, help;
`examples.py`: an example of each); the same table validates values, writes `.env.example`
and feeds `docs/config.md`, so they cannot drift apart. The process environment wins over
`.env`, which is read only when it is the operator's own (`soulflow.storage.env_file`).

This module is where the settings are loaded, so `soulflow.config` is what the daemon
imports (`Settings`, `load_settings`, `ConfigError`); the catalog's own names are imported
from `soulflow.config.catalog`.
"""

from __future__ import annotations

import io
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dotenv import dotenv_values

from soulflow.config.catalog import SETTINGS, parse_url
from soulflow.errors import SoulFlowError
from soulflow.storage.env_file import UnsafeEnvFile, read_env_text


class ConfigError(SoulFlowError):
    """A setting has a value we cannot use; the message names it and the expected form.
    The base of the configuration's errors (the backend that cannot be reached at boot, a
    zone migration that cannot run); `soulflow` prints one as a sentence and exits 1."""


_BY_NAME = {s.name: s for s in SETTINGS}
_TRUE = {"true", "1", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings; `values` holds every declared setting, parsed."""

    workspace: Path
    values: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def flag(self, name: str) -> bool:
        return str(self.values[name]).lower() in _TRUE

    def seconds_from_ms(self, name: str) -> float:
        return int(self.values[name]) / 1000.0

    @property
    def runtime_dir(self) -> Path:
        return self.workspace / "runtime"


def read_env_file(workspace: Path) -> dict[str, str]:
    """The settings in `<workspace>/.env` ({} when there is none).

    Read only when nothing but the daemon's user can have written it
    (`soulflow.storage.env_file`: no link, a regular file of the daemon's user, not
    group/world-writable, one link); otherwise a `ConfigError` whose one sentence says what
    is wrong and how to fix it, so the daemon refuses to start rather than run what a tool
    may have put there."""
    try:
        text = read_env_text(workspace)
    except UnsafeEnvFile as exc:
        raise ConfigError(str(exc)) from None
    if text is None:
        return {}
    return {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}


def load_settings(workspace: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Merge `.env` and the environment, parse every setting, check cross-setting rules."""
    env = os.environ if environ is None else environ
    merged = {**read_env_file(workspace), **{k: v for k, v in env.items() if k in _BY_NAME}}
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = merged.get(setting.name) or setting.default
        try:
            values[setting.name] = setting.parse(raw)
        except (ValueError, TypeError):
            expected = getattr(setting.parse, "expected", "a valid value")
            shown = "***" if setting.secret else repr(raw[:60])
            raise ConfigError(f"{setting.name} must be {expected} (got {shown})") from None
    settings = Settings(workspace=workspace, values=values)
    _check_rules(settings)
    return settings


def id_list(raw: str) -> list[str]:
    """`a, b,c` → ["a", "b", "c"]; used for the *_ALLOWED_USERS lists."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_rules(settings: Settings) -> None:
    if not is_loopback(settings["DASHBOARD_HOST"]) and not settings["DASHBOARD_TOKEN"]:
        raise ConfigError(
            f"DASHBOARD_HOST={settings['DASHBOARD_HOST']} is not a loopback address, so "
            "DASHBOARD_TOKEN must be set (anyone on the network could otherwise read your "
            "chats); set a long random token or bind 127.0.0.1")
    phi4 = settings["PHI4_BASE_URL"]
    if phi4:
        try:
            parse_url(phi4)
        except ValueError:
            raise ConfigError(f"PHI4_BASE_URL must be {parse_url.expected} (got {phi4[:60]!r})") \
                from None
    if settings["SLACK_BOT_TOKEN"] and not settings["SLACK_APP_TOKEN"] \
            and not settings["SLACK_DEFAULT_CHANNEL"]:
        raise ConfigError("SLACK_BOT_TOKEN is set without SLACK_APP_TOKEN, so Slack is polled: "
                          "set SLACK_DEFAULT_CHANNEL to the channel id to poll, or set "
                          "SLACK_APP_TOKEN to use Socket Mode")
    gateway = settings["DISCORD_GATEWAY_URL"]
    if gateway and urlparse(gateway).scheme not in ("ws", "wss"):
        raise ConfigError("DISCORD_GATEWAY_URL must be a ws:// or wss:// URL "
                          f"(got {gateway[:60]!r})")
    if settings["PROVIDER"] == "openrouter" and not settings["OPENROUTER_API_KEY"]:
        raise ConfigError("PROVIDER=openrouter needs OPENROUTER_API_KEY")
    if settings["PROVIDER"] == "phi4_local" and not phi4 and settings["LOCAL_MODEL"] == "off":
        raise ConfigError("PROVIDER=phi4_local needs PHI4_BASE_URL (the local endpoint's URL) "
                          "or LOCAL_MODEL=auto/on (the embedded model)")
    if settings["LOCAL_MODEL"] == "on" and phi4:
        raise ConfigError("LOCAL_MODEL=on serves the embedded model as phi4_local, but "
                          "PHI4_BASE_URL already names a phi4_local endpoint: clear one of them")
    known = {"openrouter", "phi4_local", "chatgpt", "claude_code"}
    unknown = [n for n in id_list(settings["PROVIDER_FALLBACKS"]) if n not in known]
    if unknown:
        raise ConfigError(f"PROVIDER_FALLBACKS names unknown provider(s) {', '.join(unknown)}; "
                          f"use {', '.join(sorted(known))}")


