"""docs/development.md's "Path of one message" names real places: every `file:function` hop
(and each `→ function` after it, in the same file) exists in the code, so the walk a newcomer
follows does not lead to a file or function that moved."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "development.md"
HOP = re.compile(r"^\s*\d+ ([\w/]+\.py):([\w.]+)((?:\s*→\s*\w+)*)", re.MULTILINE)


def hops() -> list[tuple[str, str, list[str]]]:
    section = DOC.read_text("utf-8").split("## Path of one message", 1)[1].split("\n## ", 1)[0]
    walk = section.split("```", 2)[1]
    # a hop's `→` list may continue on the next line, indented
    walk = re.sub(r"\n\s+→", " →", walk)
    return [(path, name, re.findall(r"→\s*(\w+)", more))
            for path, name, more in HOP.findall(walk)]


def defined(path: Path) -> set[str]:
    """`Class.method` and `function` names defined in a file."""
    names: set[str] = set()
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{item.name}" for item in node.body
                         if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef))
    return names


def test_every_hop_of_the_message_path_exists() -> None:
    walk = hops()
    assert len(walk) > 20, "the path of one message was not found"
    wrong = []
    for path, name, calls in walk:
        source = ROOT / "soulflow" / path
        if not source.is_file():
            wrong.append(f"{path}: no such file")
            continue
        names = defined(source)
        owner = name.rpartition(".")[0]
        for wanted in [name, *(f"{owner}.{c}" if owner else c for c in calls)]:
            if wanted not in names:
                wrong.append(f"{path}: {wanted} is not defined there")
    assert not wrong, "\n".join(wrong)
