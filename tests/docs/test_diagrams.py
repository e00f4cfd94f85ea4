"""docs/diagrams/*.svg are what the diagram_render tool makes of the *.mmd sources next to
them (`scripts/render-diagrams --check`), and the two diagrams the design names exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from soulflow.agent.diagram import renderer_status

ROOT = Path(__file__).resolve().parents[2]
DIAGRAMS = ROOT / "docs" / "diagrams"


def test_each_named_diagram_has_its_source_and_svg() -> None:
    for name in ("orchestrator-flow", "sensitive-seal-flow"):
        assert (DIAGRAMS / f"{name}.mmd").is_file()
        svg = (DIAGRAMS / f"{name}.svg").read_text("utf-8")
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


@pytest.mark.requires_node_renderer
def test_svgs_are_current() -> None:
    status = renderer_status()
    if status is not None:
        pytest.fail(f"the Mermaid renderer is not usable: {status}")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "render-diagrams"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
