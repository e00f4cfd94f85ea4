"""Settings: defaults, .env vs environment, clear errors naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.config import ConfigError, load_settings
from soulflow.config.catalog import SETTINGS, env_example


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {})
    assert settings["DASHBOARD_HOST"] == "127.0.0.1" and settings["DASHBOARD_PORT"] == 3789
    assert settings["PROVIDER"] == "" and settings["JOURNAL_FSYNC"] == "interval"
    assert settings.flag("DASHBOARD_ENABLED")


def test_env_file_is_read_and_environment_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('DASHBOARD_PORT=4000\nOPENROUTER_MODEL="m/from-file"\n'
                                   "# comment\nexport AGENT_CONCURRENCY=3\n")
    settings = load_settings(tmp_path, {"DASHBOARD_PORT": "5000"})
    assert settings["DASHBOARD_PORT"] == 5000
    assert settings["OPENROUTER_MODEL"] == "m/from-file"
    assert settings["AGENT_CONCURRENCY"] == 3


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("DASHBOARD_PORT", "abc", "DASHBOARD_PORT must be an integer from 0 to 65535 (got 'abc')"),
    ("DASHBOARD_PORT", "70000", "DASHBOARD_PORT must be an integer from 0 to 65535"),
    ("JOURNAL_FSYNC", "sometimes", "JOURNAL_FSYNC must be one of interval, always, never"),
    ("OPENROUTER_BASE_URL", "ftp://x", "OPENROUTER_BASE_URL must be an http:// or https:// URL"),
    ("PROVIDER", "gpt5", "PROVIDER must be one of"),
    ("PHI4_BASE_URL", "localhost:8080", "PHI4_BASE_URL must be an http:// or https:// URL"),
])
def test_invalid_values_name_the_variable_and_the_form(tmp_path: Path, name: str, value: str,
                                                       expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_settings(tmp_path, {name: value})


def test_secret_values_are_not_echoed_in_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, {"DASHBOARD_HOST": "0.0.0.0", "DASHBOARD_TOKEN": ""})
    assert "DASHBOARD_TOKEN must be set" in str(info.value)


def test_provider_needs_its_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs OPENROUTER_API_KEY"):
        load_settings(tmp_path, {"PROVIDER": "openrouter"})
    with pytest.raises(ConfigError, match="needs PHI4_BASE_URL"):
        load_settings(tmp_path, {"PROVIDER": "phi4_local", "LOCAL_MODEL": "off"})
    assert load_settings(tmp_path, {"PROVIDER": "phi4_local"})["LOCAL_MODEL"] == "auto"
    with pytest.raises(ConfigError, match="LOCAL_MODEL=on"):
        load_settings(tmp_path, {"LOCAL_MODEL": "on", "PHI4_BASE_URL": "http://127.0.0.1:1/v1"})


def test_non_loopback_with_token_is_allowed(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"DASHBOARD_HOST": "0.0.0.0", "DASHBOARD_TOKEN": "t" * 32})
    assert settings["DASHBOARD_HOST"] == "0.0.0.0"
    assert load_settings(tmp_path, {"DASHBOARD_HOST": "::1"})["DASHBOARD_HOST"] == "::1"


def test_env_example_documents_every_setting() -> None:
    example = env_example()
    for setting in SETTINGS:
        assert f"# {setting.name}=" in example
        assert setting.help in example


def test_docs_config_md_is_current() -> None:
    from soulflow.config.catalog import config_reference_markdown

    docs = Path(__file__).resolve().parents[2] / "docs" / "config.md"
    assert docs.read_text(encoding="utf-8") == config_reference_markdown(), (
        "docs/config.md is stale; regenerate it with the command written at its top")
