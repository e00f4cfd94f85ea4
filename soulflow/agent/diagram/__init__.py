"""Mermaid diagram rendering (SVG and ASCII art) for the agent's ``diagram_render`` tool.

The heavy lifting is done by the npm package ``beautiful-mermaid`` under Node.js; see
`soulflow.agent.diagram.render` and docs/diagram.md for why and how it is installed.
"""

from soulflow.agent.diagram.render import (
    INSTALL_COMMAND,
    MAX_SOURCE_BYTES,
    MAX_SVG_BYTES,
    PACKAGE_DIR,
    DiagramError,
    DiagramResult,
    render_mermaid,
    renderer_status,
)

__all__ = [
    "INSTALL_COMMAND",
    "MAX_SOURCE_BYTES",
    "MAX_SVG_BYTES",
    "PACKAGE_DIR",
    "DiagramError",
    "DiagramResult",
    "render_mermaid",
    "renderer_status",
]
