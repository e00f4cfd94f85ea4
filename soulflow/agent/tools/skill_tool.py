"""The `skill` tool: read one skill's SKILL.md in full.

The system prompt only lists skill summaries (see `soulflow.agent.skills`); this tool is how
the model gets the instructions when a skill applies. Reading is side-effect free, so the
tool is idempotent and safe to re-run after a restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from soulflow.agent.skills import SkillIndex
from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError

MAX_SKILL_BYTES = 100 * 1024


class SkillTool(Tool):
    name = "skill"
    description = (
        "Read the full instructions of a skill listed in the system prompt's Skills section. "
        "Pass the skill's name. Files a skill mentions are relative to its directory "
        "skills/<name>/."
    )
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1,
                                "description": "The skill's name, as listed."}},
        "required": ["name"],
        "additionalProperties": False,
    }
    idempotent = True
    timeout_s = 10

    def __init__(self, index: SkillIndex) -> None:
        self.index = index

    async def run(self, params: Params, ctx: ToolContext) -> str:
        name = str(params["name"])
        skill = self.index.find(name)
        if skill is None:
            available = ", ".join(self.index.names()) or "none (the skills/ folder is empty)"
            raise ToolError(f"unknown skill {name!r}. Available skills: {available}")
        return await asyncio.to_thread(_read_capped, skill.path, self.index.directory)


def _read_capped(path: Path, skills_dir: Path) -> str:
    """The file's text, cut at MAX_SKILL_BYTES with a note. A symlink leading out of the
    workspace is refused, like every other file the agent reads."""
    try:
        resolved = path.resolve()
        if not resolved.is_relative_to(skills_dir.parent.resolve()):
            raise ToolError(f"skill {path.parent.name} points outside the workspace")
        with open(resolved, "rb") as handle:
            data = handle.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"cannot read skill {path.parent.name}: {exc.strerror or exc}") from exc
    if len(data) <= MAX_SKILL_BYTES:
        return data.decode("utf-8", errors="replace")
    text = data[:MAX_SKILL_BYTES].decode("utf-8", errors="ignore")
    return (f"{text}\n\n[skill truncated at {MAX_SKILL_BYTES // 1024} KB; read the rest with "
            f"read_file path=skills/{path.parent.name}/{path.name}]")
