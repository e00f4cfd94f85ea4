"""A stand-in for the `codex` / `claude` CLIs, for testing HeadlessCliProvider.

Run through the wrappers in `tests/fakes/bin/` (put that directory first on PATH). It reads the
whole prompt from stdin, records what it received, then behaves as the JSON script in the file
named by FAKE_CLI_SCRIPT says (default: `{"mode": "echo"}`):

- `echo`: print `echo: <last User: turn of the prompt>`
- `reply`: print `text` verbatim
- `tool_call`: print `text`, then a ```tool_call block calling `name` with `arguments`
- `chunks`: print each of `chunks`, flushed, `delay_s` apart (streaming)
- `hang`: print `text`, then sleep forever; `spawn_child` starts a grandchild that sleeps too
  (sharing our stdout, like a real CLI's helpers), `ignore_term` ignores SIGTERM
- `fail`: print `stdout`, write `stderr`, exit with `exit_code` (default 1)
- `garbage`: print invalid UTF-8 and a broken tool_call block
- `empty`: print nothing

With FAKE_CLI_RECORD set, it first writes JSON there (atomically): argv, stdin, pid, pgid,
child_pid, env, cwd and invoked_as (the wrapper's name), for tests to assert on.
Stdlib only: it runs under whatever interpreter FAKE_CLI_PYTHON names.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

_TURN_RE = re.compile(r"^(?:User|Assistant|Tool result \([^)]*\)): ", re.MULTILINE)


def last_user_turn(prompt: str) -> str:
    """The text of the last `User:` turn (up to the next labelled turn)."""
    starts = [(m.start(), m.end(), m.group(0)) for m in _TURN_RE.finditer(prompt)]
    text = ""
    for index, (_, end, label) in enumerate(starts):
        if label.startswith("User"):
            stop = starts[index + 1][0] if index + 1 < len(starts) else len(prompt)
            text = prompt[end:stop]
    return text.strip()


def load_script() -> dict[str, Any]:
    path = os.environ.get("FAKE_CLI_SCRIPT")
    if not path:
        return {"mode": "echo"}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def record(prompt: str, child_pid: int | None) -> None:
    path = os.environ.get("FAKE_CLI_RECORD")
    if not path:
        return
    data = {
        "argv": sys.argv[1:], "stdin": prompt, "pid": os.getpid(), "pgid": os.getpgid(0),
        "child_pid": child_pid, "env": dict(os.environ), "cwd": os.getcwd(),
        "invoked_as": os.environ.get("FAKE_CLI_INVOKED_AS", ""),
    }
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def spawn_sleeper() -> int:
    """A grandchild holding our stdout open, as a real CLI's helper processes would."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    return child.pid


def run(script: dict[str, Any], prompt: str) -> int:
    mode = script.get("mode", "echo")
    if mode == "echo":
        out(f"echo: {last_user_turn(prompt)}\n")
    elif mode == "reply":
        out(script.get("text", ""))
    elif mode == "tool_call":
        call = {"name": script["name"], "arguments": script.get("arguments", {})}
        out(f"{script.get('text', '')}\n```tool_call\n{json.dumps(call)}\n```\n")
    elif mode == "chunks":
        for index, chunk in enumerate(script["chunks"]):
            if index:
                time.sleep(float(script.get("delay_s", 0)))
            out(chunk)
    elif mode == "hang":
        out(script.get("text", ""))
        while True:
            time.sleep(3600)
    elif mode == "fail":
        out(script.get("stdout", ""))
        sys.stderr.write(script.get("stderr", ""))
        return int(script.get("exit_code", 1))
    elif mode == "garbage":
        sys.stdout.buffer.write(b"\xff\xfe\x80 noise \x00\n```tool_call\n{name: oops, arguments:")
        sys.stdout.flush()
    elif mode != "empty":
        sys.stderr.write(f"fake_cli: unknown mode {mode!r}\n")
        return 2
    return 0


def main() -> int:
    script = load_script()
    prompt = sys.stdin.read()
    if script.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child_pid = spawn_sleeper() if script.get("spawn_child") else None
    record(prompt, child_pid)
    return run(script, prompt)


if __name__ == "__main__":
    sys.exit(main())
