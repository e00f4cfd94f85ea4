"""The `python_repl` tool: exact arithmetic, data wrangling and quick checks for the model.

It runs in the sandbox (`soulflow.agent.tools.python_sandbox`), so it needs no approval, and
since sandboxed code can touch nothing outside its own process it is pure: safe to re-run.
"""

from __future__ import annotations

from soulflow.agent.tools._sandbox_policy import SAFE_MODULES
from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.python_sandbox import run_python


class PythonReplTool(Tool):
    name = "python_repl"
    description = (
        "Run Python code in a sandbox and return what it prints; the value of the last "
        "expression is shown like in a REPL. No imports, files, network or names starting "
        f"with '_'. Available modules: {', '.join(SAFE_MODULES)}. Limits: 5 s, 256 MB."
    )
    parameters = {
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 1}},
        "required": ["code"],
        "additionalProperties": False,
    }
    idempotent = True
    timeout_s = 30

    async def run(self, params: Params, ctx: ToolContext) -> str:
        result = await run_python(params["code"])
        if not result.ok:
            message = result.error or "the code failed"
            if result.output:
                message += f"\nOutput before the error:\n{result.output.rstrip()}"
            raise ToolError(message)
        return result.output or "(no output)"
