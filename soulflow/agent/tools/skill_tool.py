"""The `skill` tool: read one skill's SKILL.md in full.

The system prompt only lists skill summaries (see `soulflow.agent.skills`); this tool is how
the model gets the instructions when a skill applies. Reading is side-effect free, so the
tool is idempotent and safe to re-run after a restart. The file is opened beneath the
workspace without following links (`SkillIndex.read`): a `SKILL.md` that is a link — to
`runtime/bus/inbound.jsonl`, the vault key, a host file — is refused, never read.
"""

from __future__ import annotations

import asyncio

from soulflow.agent.skills import Skill, SkillIndex
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
            refused = next((reason for folder, reason in self.index.refused.items()
                            if folder.casefold() == name.strip().casefold()), None)
            if refused is not None:
                raise ToolError(f"skill {name!r} cannot be read: {refused} (skills are "
                                "opened without following links)")
            available = ", ".join(self.index.names()) or "none (the skills/ folder is empty)"
            raise ToolError(f"unknown skill {name!r}. Available skills: {available}")
        return await asyncio.to_thread(_read_capped, self.index, skill)


def _read_capped(index: SkillIndex, skill: Skill) -> str:
    """The file's text, cut at MAX_SKILL_BYTES with a note. A link (anywhere on the path)
    is refused, like every file the daemon reads for the agent."""
    try:
        data = index.read(skill, MAX_SKILL_BYTES)
    except OSError as exc:
        raise ToolError(f"cannot read skill {skill.directory}: {exc.strerror or exc}") from exc
    if len(data) <= MAX_SKILL_BYTES:
        return data.decode("utf-8", errors="replace")
    text = data[:MAX_SKILL_BYTES].decode("utf-8", errors="ignore")
    return (f"{text}\n\n[skill truncated at {MAX_SKILL_BYTES // 1024} KB; read the rest with "
            f"read_file path={skill.rel.as_posix()}]")
