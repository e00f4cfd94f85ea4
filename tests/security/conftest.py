"""Shared fixtures: every test gets its own vault directory under pytest's tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.security.vault import SecretVault
from tests.vaults import file_vault


@pytest.fixture
def security_dir(tmp_path: Path) -> Path:
    return tmp_path / "security"


@pytest.fixture
def vault(security_dir: Path) -> SecretVault:
    return file_vault(security_dir)
