"""Child side of the Python sandbox; run as ``python -I -S _sandbox_runner.py MEM_MB CPU_S MAXOUT``.

It runs inside the bubblewrap sandbox (the boundary); what it does here - re-validating, a
namespace of whitelisted names, tight self-imposed limits - gives friendly errors and a second
layer, not the wall.

Reads the code from stdin, re-validates it (defence in depth: the parent already did), builds
a namespace holding only whitelisted builtins and read-only proxies of the safe modules, sets
its own resource limits, runs the code and reports on stderr as one marked JSON line.

Order matters: everything that needs files (stdin, module imports) happens before the limits,
so the limits can be tight - no new files (RLIMIT_NOFILE), no file writes (RLIMIT_FSIZE), no
new processes (RLIMIT_NPROC, except for root), bounded memory and CPU time.

Standard library only, loaded by path: nothing from the daemon is importable in here.
"""

from __future__ import annotations

import ast
import collections
import datetime
import decimal
import fractions
import functools
import itertools
import json
import math
import os
import random
import re
import resource
import statistics
import string
import sys
import textwrap
import types
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sandbox_policy as policy  # noqa: E402 - needs the path set just above

STATUS_MARKER = "@@sandbox-status@@ "
_MODULES = {
    "collections": collections, "datetime": datetime, "decimal": decimal,
    "fractions": fractions, "functools": functools, "itertools": itertools, "json": json,
    "math": math, "random": random, "re": re, "statistics": statistics, "string": string,
    "textwrap": textwrap,
}  # fmt: skip
# Public names that would give attribute lookup by string (Formatter.get_field).
_HIDDEN_ATTRS = {"string": frozenset({"Formatter"})}
_MAX_ERROR_CHARS = 2000
_FILENAME = "<sandbox>"


class _Output:
    """``print`` target: streams to stdout up to ``cap`` characters, then only counts."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.written = 0
        self.dropped = 0

    def write(self, text: str) -> None:
        room = self.cap - self.written
        if room <= 0:
            self.dropped += len(text)
            return
        part = text[:room]
        self.dropped += len(text) - len(part)
        self.written += len(part)
        sys.stdout.write(part)
        sys.stdout.flush()  # a killed child still leaves what it printed

    def print(self, *args: Any, sep: str | None = " ", end: str | None = "\n",
              file: Any = None, flush: bool = False) -> None:  # fmt: skip
        if file is not None:
            raise TypeError("print(file=...) is not available in the sandbox")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        self.write(sep.join(str(arg) for arg in args) + end)


def _module_proxy(name: str, module: types.ModuleType) -> types.SimpleNamespace:
    """Public, non-module attributes only: ``datetime.sys`` or ``statistics.sys`` would hand
    out the interpreter's ``sys`` module (and with it ``os``)."""
    hidden = _HIDDEN_ATTRS.get(name, frozenset())
    attrs = {
        attr: getattr(module, attr)
        for attr in dir(module)
        if not attr.startswith("_")
        and attr not in hidden
        and not isinstance(getattr(module, attr), types.ModuleType)
    }
    return types.SimpleNamespace(**attrs)


def _one_arg_type(obj: Any) -> type:
    """``type(x)`` only; the three-argument form builds classes from a dict."""
    return type(obj)


def _namespace(out: _Output) -> dict[str, Any]:
    import builtins

    allowed = {name: getattr(builtins, name) for name in policy.SAFE_BUILTINS}
    allowed["print"] = out.print
    allowed["type"] = _one_arg_type
    allowed["__build_class__"] = builtins.__build_class__  # needed by `class` statements
    namespace: dict[str, Any] = {"__builtins__": allowed, "__name__": "__sandbox__"}
    for name in policy.SAFE_MODULES:
        namespace[name] = _module_proxy(name, _MODULES[name])
    return namespace


def _set_limits(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    limits = [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_FSIZE, 0, 0),
        (resource.RLIMIT_NOFILE, 8, 8),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, 0, 0),  # no effect for root; nothing can fork anyway
    ]
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            if which in (resource.RLIMIT_AS, resource.RLIMIT_CPU):
                raise  # never run without the memory and CPU limits


def _describe(exc: BaseException) -> str:
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    try:
        message = str(exc)
    except Exception:  # a user-defined __str__ may itself fail
        message = "(unprintable message)"
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "..."
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return f"{text} (line {line})" if line else text


def _execute(tree: ast.Module, namespace: dict[str, Any], out: _Output) -> dict[str, Any]:
    """Run the module; like a REPL, show the last expression's value unless it is None."""
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        exec(compile(tree, _FILENAME, "exec"), namespace)
        if last is not None:
            expression = ast.Expression(last.value)
            value = eval(compile(expression, _FILENAME, "eval"), namespace)
            if value is not None:
                out.write(repr(value) + "\n")
    except MemoryError:
        return {"ok": False, "kind": "memory"}
    except BaseException as exc:  # the user's error, reported as text
        return {"ok": False, "kind": "exception", "error": _describe(exc)}
    return {"ok": True}


def _report(status: dict[str, Any]) -> None:
    sys.stderr.write(STATUS_MARKER + json.dumps(status) + "\n")
    sys.stderr.flush()


def main() -> None:
    memory_mb, cpu_s, max_output = (int(arg) for arg in sys.argv[1:4])
    sys.stdout.reconfigure(encoding="utf-8", errors="backslashreplace")  # type: ignore[attr-defined]
    code = sys.stdin.read()
    warnings.simplefilter("ignore")  # compile warnings would go to stderr, our status channel
    out = _Output(max_output)
    try:
        tree = policy.validate(code)
    except SyntaxError as exc:
        status: dict[str, Any] = {"ok": False, "kind": "invalid"}
        status["error"] = policy.describe_syntax_error(exc)
    except policy.SandboxViolation as exc:
        status = {"ok": False, "kind": "invalid", "error": str(exc)}
    else:
        namespace = _namespace(out)
        _set_limits(memory_mb, cpu_s)
        status = _execute(tree, namespace, out)
    status["dropped"] = out.dropped
    sys.stdout.flush()
    _report(status)
    os._exit(0)  # skip interpreter shutdown: no user __del__ runs after the report


if __name__ == "__main__":
    main()
