"""Default workspace files, copied by `soulflow init` and at boot when missing.

Missing files are created, existing ones are never overwritten: the workspace belongs to the
user.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from soulflow.config import env_example

DEFAULT_FILES = ("templates/AGENTS.md", "templates/USER.md", "memory/MEMORY.md",
                 "HEARTBEAT.md")
RUNTIME_DIRS = ("runtime/sessions", "runtime/bus", "runtime/dlq", "runtime/local")


def ensure_workspace(workspace: Path, *, with_env_example: bool = False) -> list[Path]:
    """Create the default files and directories that are missing; returns what was created."""
    created: list[Path] = []
    package = resources.files("soulflow.scaffold")
    for relative in DEFAULT_FILES:
        target = workspace / relative
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(package.joinpath(relative).read_text(encoding="utf-8"),
                              encoding="utf-8")
            created.append(target)
    for relative in RUNTIME_DIRS:
        directory = workspace / relative
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            created.append(directory)
    if with_env_example:
        example = workspace / ".env.example"
        example.write_text(env_example(), encoding="utf-8")
        created.append(example)
    return created
