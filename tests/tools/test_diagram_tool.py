"""The diagram_render tool: the real renderer where marked, a fake one for error paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.diagram.render import DiagramError, DiagramResult, renderer_status
from soulflow.agent.tools import diagram_tool
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.diagram_tool import DiagramRenderTool, diagram_name
from soulflow.agent.tools.registry import ToolRegistry

FLOW = "graph TD\n  A[Start] --> B[Done]\n"
DIAGRAMS = "chats/local-c1/diagrams"  # in the fixtures' chat's own folder (local:c1)


@pytest.fixture
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(DiagramRenderTool())
    return registry


@pytest.fixture
def node_renderer() -> None:
    status = renderer_status()
    if status is not None:
        pytest.fail(f"the diagram renderer is needed for this test: {status}")


@pytest.mark.requires_node_renderer
@pytest.mark.usefixtures("node_renderer")
async def test_renders_ascii_and_saves_the_svg(registry: ToolRegistry, ctx: ToolContext,
                                              workspace: Path) -> None:
    result = await registry.execute("diagram_render", {"source": FLOW}, ctx)
    assert result.status == "ok", result.output
    name = diagram_name(FLOW)
    assert len(name) == len("0123456789ab.svg")
    assert result.output.startswith("```\n") and "Start" in result.output
    svg_path = workspace / DIAGRAMS / name
    assert f"SVG saved at {DIAGRAMS}/{name} (" in result.output
    first = svg_path.read_bytes()
    assert first.lstrip().startswith(b"<svg")
    again = await registry.execute("diagram_render", {"source": FLOW}, ctx)
    assert again.output == result.output and svg_path.read_bytes() == first  # idempotent


@pytest.mark.requires_node_renderer
@pytest.mark.usefixtures("node_renderer")
async def test_single_formats_and_render_errors(registry: ToolRegistry, ctx: ToolContext,
                                                workspace: Path) -> None:
    ascii_only = await registry.execute("diagram_render",
                                        {"source": FLOW, "format": "ascii"}, ctx)
    assert "SVG" not in ascii_only.output and not (workspace / "chats").exists()
    svg_only = await registry.execute("diagram_render", {"source": FLOW, "format": "svg"}, ctx)
    assert svg_only.output.startswith(f"SVG saved at {DIAGRAMS}/")
    broken = await registry.execute("diagram_render", {"source": "pie of nonsense"}, ctx)
    assert broken.status == "error" and "diagram type" in broken.output


async def test_diagram_error_becomes_a_tool_error(registry: ToolRegistry, ctx: ToolContext,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def failing(source: str, **kwargs: Any) -> DiagramResult:
        raise DiagramError("Node.js is not installed; diagram_render needs it.")

    monkeypatch.setattr(diagram_tool, "render_mermaid", failing)
    result = await registry.execute("diagram_render", {"source": FLOW}, ctx)
    assert result.output == "Error: Node.js is not installed; diagram_render needs it."


async def test_formats_are_passed_through(registry: ToolRegistry, ctx: ToolContext,
                                          workspace: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, ...]] = []

    async def fake(source: str, *, formats: tuple[str, ...], **kwargs: Any) -> DiagramResult:
        seen.append(tuple(formats))
        return DiagramResult(svg="<svg/>" if "svg" in formats else None,
                             ascii="A --> B" if "ascii" in formats else None)

    monkeypatch.setattr(diagram_tool, "render_mermaid", fake)
    result = await registry.execute("diagram_render", {"source": FLOW}, ctx)
    assert result.output == (f"```\nA --> B\n```\n\nSVG saved at {DIAGRAMS}/"
                             f"{diagram_name(FLOW)} (6 bytes)")
    assert (workspace / DIAGRAMS / diagram_name(FLOW)).read_bytes() == b"<svg/>"
    assert not (workspace / "runtime").exists()
    await registry.execute("diagram_render", {"source": FLOW, "format": "ascii"}, ctx)
    assert seen == [("svg", "ascii"), ("ascii",)]
    bad = await registry.execute("diagram_render", {"source": FLOW, "format": "png"}, ctx)
    assert bad.status == "error" and "'png' is not one of" in bad.output


async def test_the_svg_goes_to_the_runs_own_folder_never_through_a_link(
        registry: ToolRegistry, workspace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chat's diagrams are its own; a link planted where the folder goes is refused,
    and nothing lands where it points."""
    async def fake(source: str, **kwargs: Any) -> DiagramResult:
        return DiagramResult(svg="<svg/>", ascii=None)

    monkeypatch.setattr(diagram_tool, "render_mermaid", fake)
    other = ToolContext(workspace, ChatRef("telegram", "-100", sender_id="u2"))
    done = await registry.execute("diagram_render", {"source": FLOW, "format": "svg"}, other)
    assert done.output.startswith("SVG saved at chats/telegram--100/diagrams/")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "chats" / "telegram--100" / "diagrams").rename(tmp_path / "moved")
    (workspace / "chats" / "telegram--100" / "diagrams").symlink_to(elsewhere)
    refused = await registry.execute("diagram_render", {"source": FLOW, "format": "svg"},
                                     other)
    assert refused.status == "error" and "could not be saved" in refused.output
    assert list(elsewhere.iterdir()) == []
