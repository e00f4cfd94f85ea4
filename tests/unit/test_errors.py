"""Every exception SoulFlow defines hangs on `soulflow.errors.SoulFlowError`.

The check imports every module of the package and looks at each exception class it defines,
so a new module or a new class on `Exception`, `RuntimeError` or `ValueError` fails here; the
area bases and the rule for foreign errors are in docs/development.md ("Errors").
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from soulflow.errors import SoulFlowError

PACKAGE = Path(__file__).resolve().parents[2] / "soulflow"

# The exceptions that must not hang on the root, each with why. Keep it short: an entry is a
# class that cannot import soulflow, or control flow a foreign library requires.
NOT_SOULFLOW_ERRORS = {
    # the sandbox child loads _sandbox_policy.py by path in `python -I -S` with the standard
    # library only (the rules hold even if the parent's check were bypassed), so it cannot
    # import soulflow.errors; the parent maps it to a tool result (python_sandbox.py)
    "soulflow.agent.tools._sandbox_policy.SandboxViolation",
}

# Modules read, not imported, because importing them does something.
NOT_IMPORTED = {
    "soulflow.__main__": "runs the command line",
    "soulflow.agent.tools._sandbox_runner": "the sandbox child's script; puts its folder on "
                                            "sys.path to load the policy by path",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> list[str]:
    return sorted(_module_name(path) for path in PACKAGE.rglob("*.py"))


def _exceptions_defined_in(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [value for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, BaseException)
            and value.__module__ == module_name]


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _all_exceptions() -> list[type[BaseException]]:
    return [cls for name in _modules() if name not in NOT_IMPORTED
            for cls in _exceptions_defined_in(name)]


def test_every_exception_hangs_on_the_root() -> None:
    found = _all_exceptions()
    wrong = sorted(f"{_qualified(cls)} (bases: {', '.join(b.__name__ for b in cls.__bases__)})"
                   for cls in found
                   if not issubclass(cls, SoulFlowError)
                   and _qualified(cls) not in NOT_SOULFLOW_ERRORS)
    assert not wrong, ("exceptions that do not hang on soulflow.errors.SoulFlowError (give "
                       "each its area's base, see docs/development.md, \"Errors\"):\n"
                       + "\n".join(wrong))


def test_the_walk_sees_the_exceptions() -> None:
    """The check above is only as good as the walk: it finds classes of every kind of module
    (package __init__, nested package, plain module), and the allow-list names classes that
    still exist and still are not SoulFlowErrors."""
    found = {_qualified(cls): cls for cls in _all_exceptions()}
    for name in ("soulflow.errors.StoreUnavailable", "soulflow.agent.tools.base.ToolError",
                 "soulflow.channels.telegram.http.TelegramStartError",
                 "soulflow.storage.beneath.RefusedPath"):
        assert name in found
    for name in NOT_SOULFLOW_ERRORS:
        assert name in found and not issubclass(found[name], SoulFlowError), name


def test_modules_not_imported_define_no_exceptions() -> None:
    """What the walk cannot import is read instead: no class there may be an exception."""
    for name in NOT_IMPORTED:
        path = PACKAGE.parent.joinpath(*name.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base) for base in node.bases]
                assert not any(base.endswith(("Error", "Exception")) for base in bases), \
                    f"{name}.{node.name} ({', '.join(bases)}) is an exception the walk " \
                    "cannot check: define it in a module that can be imported"
