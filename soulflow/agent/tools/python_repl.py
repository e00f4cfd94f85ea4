"""The `python_repl` tool: exact arithmetic, data wrangling and quick checks for the model.

It runs in the kernel sandbox (`soulflow.agent.tools.python_sandbox`, `CodeSandbox`), so it
needs no approval, and since sandboxed code can touch nothing outside its scratch directory it
is pure: safe to re-run. Where the host has no working bubblewrap every call needs approval.
"""

from __future__ import annotations

from soulflow.agent.tools._sandbox_policy import SAFE_MODULES
from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.python_sandbox import run_python
from soulflow.agent.tools.sandbox import CodeSandbox


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
    runs_code = True  # a secret in its arguments waits for approval (code_secrets)
    timeout_s = 30

    def __init__(self, sandbox: CodeSandbox) -> None:
        self.sandbox = sandbox

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        if self.sandbox.status().available:
            return None
        return self.sandbox.unconfined_reason()

    async def run(self, params: Params, ctx: ToolContext) -> str:
        result = await run_python(params["code"], sandbox=self.sandbox,
                                  allow_unconfined=ctx.approved)
        if not result.ok:
            message = result.error or "the code failed"
            if result.output:
                message += f"\nOutput before the error:\n{result.output.rstrip()}"
            raise ToolError(message)
        return result.output or "(no output)"
