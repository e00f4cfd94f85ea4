"""Which settings start the embedded model, and how it is registered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from soulflow.config import ConfigError, load_settings
from soulflow.providers import wiring
from soulflow.providers.wiring import build_providers, embedded_model, wants_embedded_model


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, True),
    ({"OPENROUTER_API_KEY": "k"}, False),
    ({"PHI4_BASE_URL": "http://127.0.0.1:1/v1"}, False),
    ({"PROVIDER": "claude_code"}, False),
    ({"LOCAL_MODEL": "off"}, False),
    ({"LOCAL_MODEL": "on", "OPENROUTER_API_KEY": "k"}, True),
    ({"OPENROUTER_API_KEY": "k", "PROVIDER_FALLBACKS": "phi4_local"}, True),
])
def test_when_the_embedded_model_is_wanted(tmp_path: Path, env: dict[str, str],
                                           wanted: bool) -> None:
    assert wants_embedded_model(load_settings(tmp_path, env)) is wanted


def test_the_embedded_model_is_phi4_local(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(wiring, "local_model_available", lambda python: None)
    settings = load_settings(tmp_path, {"LOCAL_MODEL_PYTHON": "/venv/bin/python",
                                        "LOCAL_MODEL_THREADS": "3"})
    local = embedded_model(settings)
    assert local is not None and local.config.python == "/venv/bin/python"
    assert local.config.n_threads == 3 and local.log_path.is_relative_to(tmp_path / "runtime")
    registry = build_providers(settings, local)
    assert registry.default_name == "phi4_local"
    assert registry.get("phi4_local").config.base_url == local.base_url


def test_missing_install_means_no_provider_unless_asked_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(wiring, "local_model_available", lambda python: "llama_cpp is missing")
    assert embedded_model(load_settings(tmp_path, {})) is None
    with pytest.raises(ConfigError, match="llama_cpp is missing"):
        embedded_model(load_settings(tmp_path, {"LOCAL_MODEL": "on"}))
    command = load_settings(tmp_path, {"LOCAL_MODEL_COMMAND": f"{sys.executable} srv {{port}}"})
    assert embedded_model(command) is not None  # a custom server needs no llama_cpp
