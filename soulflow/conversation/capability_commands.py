"""`/repl`, `/render` and `/cron`: chat commands backed by the sandbox, the diagram renderer
and the cron service, answered without the model."""

from __future__ import annotations

from soulflow.agent.diagram.render import DiagramError, render_mermaid
from soulflow.agent.tools.bwrap import ENABLE_HINT
from soulflow.agent.tools.python_sandbox import run_python
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.conversation.commands import CommandHandler
from soulflow.cron.service import CronService

REPL_USAGE = "Usage: /repl <python code>, e.g. /repl sum(range(10))"
RENDER_USAGE = "Usage: /render <mermaid source>, e.g. /render graph LR; A --> B"
CRON_USAGE = ("Usage: /cron list | /cron rm <job id>. To schedule something, ask me in words "
              "(\"every weekday at 9 remind me to …\").")


def _code_argument(command: Command, language: str) -> str:
    """The command's argument as code: chat users often paste it fenced (```python ...```),
    so backticks around it and a leading language line are dropped."""
    code = command.args.strip().strip("`")
    return code.removeprefix(f"{language}\n")


def make_repl_command(sandbox: CodeSandbox) -> CommandHandler:
    """`/repl`: the code runs in the same kernel sandbox as the python_repl tool, and only
    there - a chat user cannot approve running code unconfined on the daemon's host."""

    async def handle(command: Command, message: InboundMessage) -> str:
        code = _code_argument(command, "python")
        if not code:
            return REPL_USAGE
        status = await sandbox.ready()
        if not status.available:
            hint = "" if ENABLE_HINT in status.detail else f"; {ENABLE_HINT}"
            return f"/repl is off because this host has no OS sandbox: {status.detail}{hint}."
        result = await run_python(code, sandbox=sandbox)
        output = result.render().strip() or "(no output)"
        return f"```\n{output}\n```"

    return handle


async def render_command(command: Command, message: InboundMessage) -> str:
    source = _code_argument(command, "mermaid")
    if not source:
        return RENDER_USAGE
    try:
        result = await render_mermaid(source, formats=("ascii",))
    except DiagramError as exc:
        return f"I could not render that diagram: {exc}"
    return f"```\n{result.ascii}\n```"


def make_cron_command(cron: CronService) -> CommandHandler:
    async def handle(command: Command, message: InboundMessage) -> str:
        words = command.args.split()
        chat = message.chat
        if not words or words[0] == "list":
            jobs = await cron.list_jobs(chat)
            if not jobs:
                return "No scheduled jobs in this chat."
            lines = [f"• {job.id} {job.name or ''}: {job.schedule.describe()}, next "
                     f"{job.state.next_run_at or '-'}{'' if job.enabled else ' (disabled)'}"
                     for job in jobs]
            return "Scheduled jobs:\n" + "\n".join(lines)
        if words[0] in ("rm", "remove", "delete") and len(words) == 2:
            if all(job.id != words[1] for job in await cron.list_jobs(chat)):
                return f"There is no job {words[1]} in this chat."
            await cron.remove_job(words[1])
            return f"Removed job {words[1]}."
        return CRON_USAGE

    return handle
