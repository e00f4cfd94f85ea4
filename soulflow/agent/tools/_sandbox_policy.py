"""What sandboxed Python code may say: the AST rules and the whitelist of names.

Standard library only, with no package imports: the sandbox child loads this file by path in
an isolated interpreter (``python -I -S``) and re-checks the code itself, so the rules hold
even if the parent's check were bypassed.

These rules are an early, friendly refusal, **not the security boundary**: they tell the model
at once, with a line number, why its code will not run (an import, an underscore attribute
like ``().__class__.__bases__[0].__subclasses__()``, a frame such as ``gen.gi_frame``, a
reflective builtin like ``getattr``), instead of letting it discover that the sandbox has no
files or network. Restricted Python has been escaped before (a metaclass built with
``type()`` plus a ``match`` class pattern reached a module's globals), so the boundary is the
kernel: the code runs in bubblewrap (see `soulflow.agent.tools.sandbox`), where even code
that gets past these rules can touch only its scratch directory.
"""

from __future__ import annotations

import ast

MAX_CODE_CHARS = 100_000

SAFE_MODULES: tuple[str, ...] = (
    "math", "statistics", "json", "re", "datetime", "random", "itertools", "functools",
    "collections", "decimal", "fractions", "string", "textwrap",
)  # fmt: skip
"""Modules available as pre-imported names (through read-only proxies, see the runner)."""

SAFE_BUILTINS: tuple[str, ...] = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "classmethod",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash",
    "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "object", "oct", "ord", "pow", "print", "property", "range", "repr", "reversed",
    "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "type",
    "zip", "True", "False", "None", "NotImplemented", "Ellipsis",
    "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError",
    "KeyError", "LookupError", "MemoryError", "NameError", "NotImplementedError",
    "OverflowError", "RecursionError", "RuntimeError", "StopIteration", "TypeError",
    "UnicodeError", "ValueError", "ZeroDivisionError",
)  # fmt: skip
"""Builtins the code can use; everything else is simply absent from its namespace."""

FORBIDDEN_NAMES = frozenset(
    {
        "eval", "exec", "compile", "open", "input", "breakpoint", "getattr", "setattr",
        "delattr", "hasattr", "vars", "globals", "locals", "dir", "memoryview", "help",
        "exit", "quit", "bytearray", "copyright", "credits", "license",
    }
)  # fmt: skip
"""Reflective or I/O builtins, named in errors so the model learns why its code failed."""

FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "gi_frame", "gi_code", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
        "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace",
        "tb_frame", "tb_next", "co_code", "co_consts", "co_names", "func_globals",
        "get_field", "format_field",
    }
)  # fmt: skip
"""Non-underscore attributes that lead to frames, code objects or attribute lookup by name."""

ALLOWED_DUNDER_METHODS = frozenset(
    {
        "__init__", "__repr__", "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
        "__ge__", "__hash__", "__len__", "__iter__", "__next__", "__contains__", "__getitem__",
        "__setitem__", "__delitem__", "__bool__", "__call__", "__add__", "__radd__", "__sub__",
        "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__floordiv__",
        "__mod__", "__pow__", "__neg__", "__pos__", "__abs__", "__enter__", "__exit__",
    }
)  # fmt: skip
"""Methods a class body may *define* (defining them reaches nothing; accessing stays banned)."""


_BANNED_OUTRIGHT: dict[type[ast.AST], str] = {
    ast.Import: f"'import' ({', '.join(SAFE_MODULES)} are already available)",
    ast.ImportFrom: f"'from ... import' ({', '.join(SAFE_MODULES)} are already available)",
    ast.Global: "'global'",
    ast.Nonlocal: "'nonlocal'",
    ast.AsyncFunctionDef: "async code",
    ast.Await: "'await'",
    ast.AsyncFor: "'async for'",
    ast.AsyncWith: "'async with'",
}
"""Statements refused wherever they stand, with how the violation names them."""


class SandboxViolation(Exception):
    """The code uses something the sandbox forbids; the message names it and its line."""


def validate(code: str) -> ast.Module:
    """Parse ``code`` and check every node; raise `SyntaxError` or `SandboxViolation`."""
    if len(code) > MAX_CODE_CHARS:
        raise SandboxViolation(f"code is longer than {MAX_CODE_CHARS} characters")
    tree = ast.parse(code, filename="<sandbox>", mode="exec")
    _Checker().visit(tree)
    return tree


def describe_syntax_error(exc: SyntaxError) -> str:
    return f"SyntaxError: {exc.msg} (line {exc.lineno})"


class _Checker(ast.NodeVisitor):
    """Raises on the first forbidden construct, in source order."""

    def __init__(self) -> None:
        self._class_depth = 0

    def fail(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", "?")
        raise SandboxViolation(f"line {line}: {what} is not allowed in the sandbox")

    def check_identifier(self, node: ast.AST, name: str | None, kind: str) -> None:
        if name and name != "_" and name.startswith("_"):
            self.fail(node, f"{kind} '{name}' (names starting with '_')")

    # --- statements that are banned outright

    def visit(self, node: ast.AST) -> None:
        banned = _BANNED_OUTRIGHT.get(type(node))
        if banned is not None:
            self.fail(node, banned)
        super().visit(node)

    # --- names and attributes

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self.fail(node, f"'{node.id}'")
        self.check_identifier(node, node.id, "name")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.generic_visit(node)  # inner attributes first: `a.__x__.__y__` reports __x__
        if node.attr.startswith("_"):
            self.fail(node, f"attribute '.{node.attr}' (attributes starting with '_')")
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.fail(node, f"attribute '.{node.attr}'")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) != 1:
            self.fail(node, "type() with other than one argument (creating classes)")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        self.check_identifier(node, node.arg, "keyword argument")
        self.generic_visit(node)

    # --- definitions

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if not (self._class_depth and node.name in ALLOWED_DUNDER_METHODS):
            self.check_identifier(node, node.name, "function name")
        outer, self._class_depth = self._class_depth, 0
        self.generic_visit(node)
        self._class_depth = outer

    def visit_Lambda(self, node: ast.Lambda) -> None:
        outer, self._class_depth = self._class_depth, 0
        self.generic_visit(node)
        self._class_depth = outer

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.check_identifier(node, node.name, "class name")
        for keyword in node.keywords:
            self.fail(keyword, f"class keyword '{keyword.arg}' (metaclasses)")
        self._class_depth += 1
        self.generic_visit(node)
        self._class_depth -= 1

    def visit_arg(self, node: ast.arg) -> None:
        self.check_identifier(node, node.arg, "parameter")
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self.check_identifier(node, node.name, "exception variable")
        self.generic_visit(node)

    # --- pattern matching binds names and reads attributes without Name/Attribute nodes

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self.check_identifier(node, node.name, "pattern name")
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        self.check_identifier(node, node.name, "pattern name")

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.check_identifier(node, node.rest, "pattern name")
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:
            if attr.startswith("_") or attr in FORBIDDEN_ATTRIBUTES:
                self.fail(node, f"class pattern attribute '{attr}'")
        self.generic_visit(node)
