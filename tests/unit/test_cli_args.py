"""`--workspace` works before or after the command name, and from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.cli.main import main


@pytest.mark.parametrize("argv", [["--workspace", "{ws}", "status"],
                                  ["status", "--workspace", "{ws}"]])
def test_workspace_option_in_either_position(argv: list[str], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    assert main([a.replace("{ws}", str(missing)) for a in argv]) == 1
    assert f"the workspace {missing} does not exist" in capsys.readouterr().err


def test_workspace_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOULFLOW_WORKSPACE", str(tmp_path / "env-ws"))
    assert main(["status"]) == 1
    assert "env-ws does not exist" in capsys.readouterr().err


def test_init_creates_the_named_directory(tmp_path: Path) -> None:
    assert main(["--workspace", str(tmp_path / "w"), "init"]) == 0
    assert (tmp_path / "w" / ".env.example").is_file()
