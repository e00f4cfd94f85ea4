"""docs/development.md's layer table is the import-graph test's LAYERS, written for people:
every module LAYERS places is named in the row of its layer, and every row is a layer LAYERS
uses. So the table a newcomer reads cannot drift from the rule the suite enforces."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_import_graph import LAYERS

DOC = Path(__file__).resolve().parents[2] / "docs" / "development.md"
ROW = re.compile(r"^\| (\d+(?:\.\d+)?) [a-z' ]+ \| (.+?) \|", re.MULTILINE)
BRACES = re.compile(r"([\w.]+)\.\{([\w,]+)\}")


def rows() -> dict[float, set[str]]:
    """Layer number → the module names its row gives in backticks (`a.{b,c}` is a.b, a.c)."""
    section = DOC.read_text("utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    table: dict[float, set[str]] = {}
    for number, cell in ROW.findall(section):
        names: set[str] = set()
        for quoted in re.findall(r"`([^`]+)`", cell):
            expanded = BRACES.sub(lambda m: ",".join(f"{m[1]}.{part}"
                                                     for part in m[2].split(",")), quoted)
            names.update(name.strip() for name in expanded.split(","))
        table[float(number)] = names
    return table


def row_of(layer: float, numbers: list[float]) -> float:
    """A decimal inside a layer (1.05, 6.1) is shown in the row it orders within."""
    return max(n for n in numbers if n <= layer)


def test_every_module_of_the_graph_test_is_in_its_row() -> None:
    table = rows()
    numbers = sorted(table)
    assert numbers, "no layer table found under '## Layers' in docs/development.md"
    missing = []
    for module, layer in LAYERS.items():
        name = module.removeprefix("soulflow.")
        if module == "soulflow":
            name = "__version__"
        if name not in table[row_of(layer, numbers)]:
            missing.append(f"{module} (layer {layer}) is not in row "
                           f"{row_of(layer, numbers)} of docs/development.md")
    assert not missing, "\n".join(missing)


def test_every_row_is_a_layer_of_the_graph_test() -> None:
    used = {row_of(layer, sorted(rows())) for layer in LAYERS.values()}
    assert set(rows()) == used
