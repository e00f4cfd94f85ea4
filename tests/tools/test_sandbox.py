"""The Python sandbox: escape attempts, resource limits, ordinary computations, the tool."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools._sandbox_policy import SandboxViolation, validate
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.python_sandbox import RUNNER, STATUS_MARKER, SandboxResult, run_python
from soulflow.agent.tools.sandbox import CodeSandbox
from tests.tools.sandbox_support import working_sandbox


@pytest.fixture(scope="module")
def sandbox() -> CodeSandbox:
    return working_sandbox()

# ----------------------------------------------------------------- escapes (rejected up front)


@pytest.mark.parametrize(
    ("code", "named"),
    [
        ("__import__('os')", "'__import__'"),
        ("open('/etc/passwd').read()", "'open'"),
        ("().__class__.__bases__[0].__subclasses__()", "'.__class__'"),
        ("import os", "'import'"),
        ("from os import system", "'from ... import'"),
        ("getattr(1, 'real')", "'getattr'"),
        ("eval('1+1')", "'eval'"),
        ("exec('x = 1')", "'exec'"),
        ("compile('1', 'f', 'eval')", "'compile'"),
        ("globals()", "'globals'"),
        ("vars()", "'vars'"),
        ("dir()", "'dir'"),
        ("breakpoint()", "'breakpoint'"),
        ("input()", "'input'"),
        ("memoryview(b'x')", "'memoryview'"),
        ("def f():\n    global x\n    x = 1", "'global'"),
        ("_hidden = 1", "'_hidden'"),
        ("print.__self__", "'.__self__'"),
        ("g = (i for i in [1])\ng.gi_frame.f_back", "'.gi_frame'"),
        ("type('X', (), {})", "type() with other than one argument"),
        ("class A(metaclass=type):\n    pass", "metaclasses"),
        ("match 1:\n    case int(__class__=c):\n        pass", "'__class__'"),
        ("async def f():\n    pass", "async code"),
        ("def f(_secret):\n    return 1", "'_secret'"),
        ("def __init__(self):\n    pass", "'__init__'"),  # dunders only as methods
    ],
)
async def test_escape_attempts_are_rejected(
    code: str, named: str, sandbox: CodeSandbox
) -> None:
    result = await run_python(code, sandbox=sandbox)
    assert not result.ok
    assert result.error is not None
    assert named in result.error and "is not allowed in the sandbox" in result.error
    assert result.error.startswith("line ")


async def test_rejection_names_the_line(sandbox: CodeSandbox) -> None:
    result = await run_python("x = 1\ny = 2\nz = x.__class__", sandbox=sandbox)
    assert result.error is not None and result.error.startswith("line 3:")


async def test_syntax_errors_are_reported(sandbox: CodeSandbox) -> None:
    result = await run_python("def f(:\n  pass", sandbox=sandbox)
    assert result == SandboxResult(False, "", "SyntaxError: invalid syntax (line 1)")


@pytest.mark.parametrize(
    "code",
    [
        "datetime.sys",  # module proxies drop module attributes (datetime.sys would be sys)
        "statistics.sys",
        "string.Formatter",  # Formatter.get_field looks attributes up by string
        "json.decoder",
    ],
)
async def test_module_proxies_hide_dangerous_attributes(code: str, sandbox: CodeSandbox) -> None:
    result = await run_python(code, sandbox=sandbox)
    assert not result.ok
    assert result.error is not None and result.error.startswith("AttributeError:")


def test_child_revalidates_the_code() -> None:
    """Defence in depth: fed directly, the runner refuses what the parent would have."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(RUNNER), "64", "2", "1000"],
        input="().__class__.__bases__",
        capture_output=True,
        text=True,
        env={},
        timeout=30,
        check=False,
    )
    status_line = proc.stderr.strip().splitlines()[-1]
    assert status_line.startswith(STATUS_MARKER)
    status = json.loads(status_line[len(STATUS_MARKER) :])
    assert status["ok"] is False and status["kind"] == "invalid"
    assert "'.__class__'" in status["error"]
    assert proc.stdout == ""


def test_validate_raises_for_direct_callers() -> None:
    with pytest.raises(SandboxViolation):
        validate("import os")
    validate("for _ in range(3):\n    pass")  # a bare '_' is an ordinary throwaway name


# ----------------------------------------------------------------- limits


async def test_infinite_loop_times_out(sandbox: CodeSandbox) -> None:
    code = "print('started')\nwhile True:\n    pass"
    result = await run_python(code, timeout_s=1, sandbox=sandbox)
    assert result.error == "timed out after 1 s"
    assert result.output == "started\n"  # what was printed before the kill is kept


async def test_cpu_limit(sandbox: CodeSandbox) -> None:
    result = await run_python("while True:\n    pass", timeout_s=15, cpu_s=1, sandbox=sandbox)
    assert result.error == "CPU time limit of 1 s exceeded"


async def test_memory_limit(sandbox: CodeSandbox) -> None:
    result = await run_python("x = ' ' * (1024**3)", sandbox=sandbox)
    assert result == SandboxResult(False, "", "memory limit of 256 MB exceeded")


async def test_deep_recursion(sandbox: CodeSandbox) -> None:
    result = await run_python("def f(n):\n    return f(n + 1)\nf(0)", sandbox=sandbox)
    assert result.error == "RecursionError: maximum recursion depth exceeded (line 2)"


async def test_huge_output_is_truncated(sandbox: CodeSandbox) -> None:
    code = "for i in range(100000):\n    print('line', i)"
    result = await run_python(code, max_output=100, sandbox=sandbox)
    assert result.ok
    kept, note = result.output.rsplit("\n[", 1)
    assert len(kept) <= 100 and kept.startswith("line 0\nline 1\n")
    assert note.startswith("output truncated:") and "more characters]" in note


async def test_runtime_error_keeps_earlier_output(sandbox: CodeSandbox) -> None:
    result = await run_python("print('before')\n1 / 0", sandbox=sandbox)
    assert result == SandboxResult(
        False, "before\n", "ZeroDivisionError: division by zero (line 2)"
    )
    assert result.render() == "before\nError: ZeroDivisionError: division by zero (line 2)"


# ----------------------------------------------------------------- ordinary use


@pytest.mark.parametrize(
    ("code", "output"),
    [
        ("1 + 2", "3\n"),
        ("print('hi')\nx = 2\nx ** 10", "hi\n1024\n"),
        ("x = None\nx", ""),  # None is not echoed, like a REPL
        ("print('a', 'b', sep='-', end='!')", "a-b!"),
        ("round(math.sqrt(2), 6)", "1.414214\n"),
        ("statistics.mean([1, 2, 3, 4])", "2.5\n"),
        ("json.dumps({'a': [1, 2]})", "'{\"a\": [1, 2]}'\n"),
        ("re.findall(r'\\d+', 'a1b22c333')", "['1', '22', '333']\n"),
        ("str(datetime.date(2024, 2, 28) + datetime.timedelta(days=2))", "'2024-03-01'\n"),
        ("str(decimal.Decimal('0.1') + decimal.Decimal('0.2'))", "'0.3'\n"),
        ("fractions.Fraction(1, 3) + fractions.Fraction(1, 6)", "Fraction(1, 2)\n"),
        ("collections.Counter('abca').most_common(1)", "[('a', 2)]\n"),
        ("list(itertools.combinations('abc', 2))[:2]", "[('a', 'b'), ('a', 'c')]\n"),
        ("functools.reduce(lambda a, b: a * b, range(1, 6))", "120\n"),
        ("random.seed(7)\nr = random.randint(1, 6)\n1 <= r <= 6", "True\n"),
        ("textwrap.shorten('hello wonderful world', 15)", "'hello [...]'\n"),
        ("string.ascii_lowercase[:5]", "'abcde'\n"),
        ("sorted({3, 1, 2}, reverse=True)", "[3, 2, 1]\n"),
        ("isinstance(type(1.5)(2), float)", "True\n"),
        (
            "class Point:\n"
            "    def __init__(self, x, y):\n"
            "        self.x, self.y = x, y\n"
            "    def __repr__(self):\n"
            "        return f'Point({self.x}, {self.y})'\n"
            "Point(1, 2)",
            "Point(1, 2)\n",
        ),
        (
            "try:\n    {}['k']\nexcept KeyError as e:\n    print('missing', e)",
            "missing 'k'\n",
        ),
        ("for _ in range(2):\n    print('x')", "x\nx\n"),
    ],
)
async def test_ordinary_code(code: str, output: str, sandbox: CodeSandbox) -> None:
    result = await run_python(code, sandbox=sandbox)
    assert result == SandboxResult(True, output), result


# ----------------------------------------------------------------- the tool


async def test_python_repl_tool(ctx: ToolContext, sandbox: CodeSandbox) -> None:
    registry = build_default_registry(sandbox=sandbox)
    tool = registry.get("python_repl")
    assert tool is not None and tool.idempotent
    assert tool.needs_approval({"code": "1"}, ctx) is None

    ok = await registry.execute("python_repl", {"code": "sum(range(10))"}, ctx)
    assert (ok.status, ok.output) == ("ok", "45\n")

    quiet = await registry.execute("python_repl", {"code": "x = 1"}, ctx)
    assert quiet.output == "(no output)"

    failed = await registry.execute("python_repl", {"code": "print('so far')\n[][1]"}, ctx)
    assert failed.status == "error"
    assert failed.output == (
        "Error: IndexError: list index out of range (line 2)\n"
        "Output before the error:\nso far"
    )

    refused = await registry.execute("python_repl", {"code": "import os"}, ctx)
    assert refused.status == "error" and "'import'" in refused.output
