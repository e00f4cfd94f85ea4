"""Agent tools: what the model can do, and the one execution path every call goes through.

* `base` - `Tool`, `ToolContext`, `ToolResult`, `ToolError`, `ChatRef`, `ToolServices`.
* `registry` - `ToolRegistry`: validation, approval, secrets, timeouts, masking, truncation.
* `workspace` - keeping paths inside the workspace; which writes are routine.
* `files` - read_file, write_file, edit_file, list_dir.
* `shell` / `shell_policy` / `process` - the exec tool, its approval rules, child processes.
* `web` / `html_text` - web_fetch with private-network protection.
* `python_sandbox` / `python_repl` - the sandboxed Python engine and its tool.
* `sandbox` / `bwrap` / `sandbox_masks` / `pids_cgroup` - the kernel sandbox (`CodeSandbox`)
  that exec, python_repl and /repl run in.
* `mcp_client` - the operator's MCP servers (``mcp.json``): their tools as
  ``mcp__<server>__<tool>``, stdio servers inside the same sandbox (docs/mcp.md).

Other tools (message, request_file, spawn, cron, diagram_render) are registered by the
runtime, which owns the services they need.
"""

from __future__ import annotations

from collections.abc import Iterable

from soulflow.agent.tools.base import (
    ChatRef,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    ToolServices,
)
from soulflow.agent.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
from soulflow.agent.tools.python_repl import PythonReplTool
from soulflow.agent.tools.python_sandbox import SandboxResult, run_python
from soulflow.agent.tools.registry import DEFAULT_MAX_OUTPUT_CHARS, ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.agent.tools.shell import ExecTool
from soulflow.agent.tools.web import WebFetchTool
from soulflow.security.redact import Redactor

__all__ = [
    "ChatRef",
    "CodeSandbox",
    "EditFileTool",
    "ExecTool",
    "ListDirTool",
    "PythonReplTool",
    "ReadFileTool",
    "SandboxResult",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolServices",
    "WebFetchTool",
    "WriteFileTool",
    "build_default_registry",
    "run_python",
]


def build_default_registry(
    *,
    allow_private_fetch: bool = False,
    allowed_hosts: Iterable[str] = frozenset(),
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    redactor: Redactor | None = None,
    sandbox: CodeSandbox | None = None,
) -> ToolRegistry:
    """A registry with the built-in tools: files, exec, web_fetch and python_repl.

    ``sandbox`` is shared by exec and python_repl (the daemon passes its own, which `/repl`
    also uses); without one the registry makes its own.
    """
    registry = ToolRegistry(max_output_chars=max_output_chars, redactor=redactor)
    sandbox = sandbox or CodeSandbox()
    for tool in (
        ReadFileTool(),
        WriteFileTool(sandbox.quotas),
        EditFileTool(sandbox.quotas),
        ListDirTool(),
        ExecTool(sandbox),
        WebFetchTool(allow_private=allow_private_fetch, allowed_hosts=allowed_hosts),
        PythonReplTool(sandbox),
    ):
        registry.register(tool)
    return registry
