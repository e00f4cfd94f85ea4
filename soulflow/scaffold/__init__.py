"""Default workspace files, copied by `soulflow init` and at boot when missing.

Missing files are created, existing ones are never overwritten: the workspace belongs to the
user.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from soulflow.config.catalog import env_example
from soulflow.storage.atomic import create_exclusive, write_text_atomic

DEFAULT_FILES = ("templates/AGENTS.md", "templates/USER.md", "memory/MEMORY.md",
                 "HEARTBEAT.md")
RUNTIME_DIRS = ("runtime/sessions", "runtime/bus", "runtime/dlq", "runtime/local")


def ensure_workspace(workspace: Path, *, with_env_example: bool = False) -> list[Path]:
    """Create the default files and directories that are missing; returns what was created."""
    created: list[Path] = []
    package = resources.files("soulflow.scaffold")
    for relative in DEFAULT_FILES:
        target = workspace / relative
        if target.exists():
            continue
        try:  # never overwrites, even a file the user creates at the same moment
            create_exclusive(target, package.joinpath(relative).read_bytes(), mode=0o644)
        except FileExistsError:
            continue
        created.append(target)
    for relative in RUNTIME_DIRS:
        directory = workspace / relative
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            created.append(directory)
    if with_env_example:
        example = workspace / ".env.example"
        write_text_atomic(example, env_example())
        created.append(example)
    return created
