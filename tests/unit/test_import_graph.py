"""The import graph follows the design: dependencies point down the layer table, no modules
import each other (not even inside one package), and only the platform packages
(`soulflow/channels/<platform>/`) import a platform SDK.

Layers, lowest first. A module may import its own package and any layer below its own (a
decimal orders two packages inside one layer); the entry points of layer 8 may also import each
other. The most specific prefix in LAYERS decides a module's layer.

| layer | modules |
|---|---|
| 0 contracts | `errors` (the exception root) < `contracts` (shared records, protocols, and |
|   | the errors they raise); they import nothing else of soulflow; the version |
| 1 foundation | `storage`, `config.examples`, `supervisor`, `telemetry`, `tracing` < |
|   | `config.catalog` < `config` (loading) < `scaffold` |
| 1.5 models | what the stores keep and the pure rules on it: `security.{errors,syntax,...}`, |
|   | `cron.{schedule,jobs}`, `decision.rules`, `tasks.{model,review}`, `agent.run.{events,...}` |
| 1.8 store port | `backends` (every store protocol, the file and Redis stores, the backend) |
| 2 stores' users | `security`, `decision`, `cron`, `tasks` (graph, answers, engine, ...) |
| 3 observability | `events` (publishes task-store changes, so above `tasks`), `logs` (redacts) |
| 4 domain | `agent`, `bus` (peers: they never import each other) |
| 5 edges | `channels`, `providers` |
| 5.5 conversation | `conversation` (a message taken in → its turn complete) |
| 6 services | `heartbeat` < `ops`, and the task graph's wiring to the agent: |
|   | `tasks.{wiring,chat,executors,progress,tool}` |
| 7 runtime | `runtime` (builds and starts everything) |
| 8 entry points | `cli` (the command line; `cli.wiring`: a runtime with its dashboard), |
|   | `doctor`, `dashboard`, `__main__` |

Imports under `if TYPE_CHECKING:` are annotations only (no import-time edge): they are not
counted for the table or for cycles, but one may not point up the table either (an upward
annotation is a dependency the table cannot see). Imports inside functions count. A cycle is
any loop of import-time edges among soulflow modules, `from pkg import mod` counting as an
edge to the submodule `mod`. The same table is in docs/development.md.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "soulflow"

LAYERS: dict[str, float] = {
    # the package holds __version__; errors is the exception root, which the contracts'
    # errors (ProviderError, SendError) hang on
    **dict.fromkeys(["soulflow", "soulflow.errors"], 0),
    "soulflow.contracts": 0.1,
    **dict.fromkeys(["soulflow.storage", "soulflow.config.examples",
                     "soulflow.supervisor", "soulflow.telemetry", "soulflow.tracing"], 1),
    "soulflow.config.catalog": 1.05,  # its reference shows the examples
    "soulflow.config": 1.1,  # loads the settings the catalog declares
    "soulflow.scaffold": 1.2,  # writes the workspace's default files from the config
    # models: what the stores keep and the pure rules they apply to it (no I/O, no service)
    **dict.fromkeys([
        *(f"soulflow.security.{name}" for name in
          ("errors", "syntax", "detection", "detectors", "platform_tokens", "dead_letters",
           "vault_records")),
        "soulflow.cron.schedule", "soulflow.cron.jobs", "soulflow.decision.rules",
        "soulflow.tasks.model", "soulflow.tasks.review",
        *(f"soulflow.agent.run.{name}" for name in ("events", "reducer", "timing"))], 1.5),
    # the store port (base), the file and Redis stores built on the models, and the one
    # place that picks a backend (wiring)
    "soulflow.backends": 1.8,
    **dict.fromkeys(["soulflow.security", "soulflow.decision", "soulflow.cron",
                     "soulflow.tasks"], 2),
    **dict.fromkeys(["soulflow.events", "soulflow.logs"], 3),
    **dict.fromkeys(["soulflow.agent", "soulflow.bus"], 4),
    **dict.fromkeys(["soulflow.channels", "soulflow.providers"], 5),
    "soulflow.conversation": 5.5,  # the pipeline between the channels' edge and the services
    **dict.fromkeys(["soulflow.heartbeat",
                     *(f"soulflow.tasks.{name}" for name in
                       ("wiring", "chat", "executors", "progress", "tool"))], 6),
    "soulflow.ops": 6.1,  # watches the heartbeat and the other services
    "soulflow.runtime": 7,
    # entry points: programs around a runtime, free to use each other
    **dict.fromkeys(["soulflow.__main__", "soulflow.cli", "soulflow.doctor",
                     "soulflow.dashboard"], 8),
}

PLATFORM_SDKS = ("slack_sdk", "slack_bolt", "telegram", "discord")
# each SDK in its own platform's package only (the rest of channels/ is the shared edge)
SDK_HOMES = {"slack_sdk": "soulflow.channels.slack", "slack_bolt": "soulflow.channels.slack",
             "telegram": "soulflow.channels.telegram", "discord": "soulflow.channels.discord"}
# aiohttp's client is an ordinary HTTP library; its web *server* serves the dashboard only
# (cron/api.py holds the /api/cron routes the dashboard mounts)
WEB_SERVER_HOMES = ("soulflow.channels", "soulflow.dashboard", "soulflow.cron.api")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    annotation: bool = False  # under `if TYPE_CHECKING:`: no edge when the code runs


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


ENTRY_POINTS = 8


def layer_of(module: str) -> float:
    """The layer of the most specific prefix; a module missing from the table is an error, so
    a new top-level package has to be placed deliberately."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS and (end > 1 or len(parts) == 1):
            return LAYERS[prefix]
    raise AssertionError(f"{module} has no layer: add it to LAYERS in {__file__}")


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, root: Path = PACKAGE) -> list[Edge]:
    """Every module `path` imports, `from a import b` counted as both `a` and `a.b` (b may be a
    submodule, whose layer is the one that matters); imports under `if TYPE_CHECKING:` are
    marked `annotation`."""
    source = module_name(path, root)
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    annotations_only = _type_checking_lines(tree)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        annotation = node.lineno in annotations_only
        if isinstance(node, ast.Import):
            edges.extend(Edge(source, alias.name, node.lineno, annotation)
                         for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        edges.append(Edge(source, base, node.lineno, annotation))
        edges.extend(Edge(source, f"{base}.{alias.name}", node.lineno, annotation)
                     for alias in node.names
                     if not base.startswith("soulflow") or _is_module(root, base, alias.name))
    return edges


def _is_module(root: Path, package: str, name: str) -> bool:
    """`from soulflow.x import y`: y is a submodule (its own layer) or just a name in x."""
    folder = root.parent.joinpath(*package.split("."), name)
    return folder.is_dir() or folder.with_suffix(".py").is_file()


def all_edges(root: Path = PACKAGE) -> list[Edge]:
    return [edge for path in sorted(root.rglob("*.py")) for edge in imports_of(path, root)]


def _within(module: str, homes: tuple[str, ...]) -> bool:
    return any(module == home or module.startswith(home + ".") for home in homes)


def _is_soulflow(module: str) -> bool:
    return module == "soulflow" or module.startswith("soulflow.")


def layer_violations(edges: list[Edge]) -> list[str]:
    wrong = []
    for edge in edges:
        if edge.annotation or not _is_soulflow(edge.target):
            continue
        source, target = layer_of(edge.source), layer_of(edge.target)
        same_package = edge.source.split(".")[:2] == edge.target.split(".")[:2]
        peers = target == source and (same_package or source == ENTRY_POINTS)
        if target > source or (target == source and not peers):
            wrong.append(f"{edge.source}:{edge.line} (layer {source}) imports {edge.target} "
                         f"(layer {target})")
    return sorted(set(wrong))


def type_checking_violations(edges: list[Edge]) -> list[str]:
    """Imports under `if TYPE_CHECKING:` that point to a higher layer than the importer's: a
    dependency on what sits above, hidden from the layer check (the same layer is fine)."""
    wrong = []
    for edge in edges:
        if not edge.annotation or not _is_soulflow(edge.target):
            continue
        source, target = layer_of(edge.source), layer_of(edge.target)
        if target > source:
            wrong.append(f"{edge.source}:{edge.line} (layer {source}) imports {edge.target} "
                         f"(layer {target}) under TYPE_CHECKING")
    return sorted(set(wrong))


def import_cycles(edges: list[Edge], modules: Iterable[str]) -> list[str]:
    """Each loop of import-time edges among `modules` (annotations do not count), shown as
    one path around it with the line of each import."""
    nodes = set(modules)
    lines: dict[tuple[str, str], int] = {}
    for edge in edges:
        if not edge.annotation and edge.target in nodes and edge.target != edge.source:
            lines.setdefault((edge.source, edge.target), edge.line)
    graph: dict[str, set[str]] = {node: set() for node in nodes}
    for source, target in lines:
        graph[source].add(target)
    wrong = []
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        path = _loop_through(min(component), graph, component)
        hops = " -> ".join(f"{a}:{lines[a, b]}" for a, b in zip(path, [*path[1:], path[0]],
                                                                  strict=True))
        wrong.append(f"{hops} -> {path[0]} (cycle of {', '.join(sorted(component))})")
    return sorted(wrong)


def _strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a long chain of imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            step = next(targets, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    found.append(frozenset(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return found


def _loop_through(start: str, graph: dict[str, set[str]], within: frozenset[str]) -> list[str]:
    """A shortest path from `start` back to itself inside one strongly connected component."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node] & within):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path[::-1]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"{start} is on no loop of {sorted(within)}")


def sdk_violations(edges: list[Edge]) -> list[str]:
    wrong = []
    for edge in edges:
        if edge.annotation:
            continue
        sdk = edge.target.split(".")[0]
        if sdk in PLATFORM_SDKS and not _within(edge.source, (SDK_HOMES[sdk],)):
            wrong.append(f"{edge.source}:{edge.line} imports {edge.target}")
        if _within(edge.target, ("aiohttp.web",)) and \
                not _within(edge.source, WEB_SERVER_HOMES):
            wrong.append(f"{edge.source}:{edge.line} imports the aiohttp web server")
    return sorted(set(wrong))


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


def test_imports_point_down_the_layers() -> None:
    wrong = layer_violations(all_edges())
    assert not wrong, "imports against the layer table:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    modules = [module_name(path) for path in PACKAGE.rglob("*.py")]
    wrong = import_cycles(all_edges(), modules)
    assert not wrong, ("modules that import each other (move what both need to where it "
                       "belongs, below both):\n" + "\n".join(wrong))


def test_no_upward_imports_under_type_checking() -> None:
    wrong = type_checking_violations(all_edges())
    assert not wrong, ("annotations that depend on a higher layer (take a protocol or a "
                       "record from below instead):\n" + "\n".join(wrong))


def test_platform_sdks_only_in_their_platform_package() -> None:
    wrong = sdk_violations(all_edges())
    assert not wrong, "platform SDKs outside soulflow/channels/<platform>/:\n" + "\n".join(wrong)


def test_the_checker_finds_wrong_way_imports(tmp_path: Path) -> None:
    """The rules themselves, on a small tree: a store importing the bus, an agent module
    importing a provider or an SDK, and the dashboard's server outside the dashboard are found;
    annotation-only imports, own-package imports and downward ones are not."""
    root = tmp_path / "soulflow"
    files = {
        "cron/service.py": "from soulflow.bus.bus import MessageBus\n"
                           "from soulflow.contracts import ChatRef\nfrom . import store\n",
        "cron/store.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from soulflow.runtime import Runtime\n",
        "agent/loop.py": "import discord\n\ndef f():\n    from soulflow.providers import cli\n",
        "agent/web.py": "import aiohttp\nfrom aiohttp import web\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    edges = all_edges(root)
    assert _places(layer_violations(edges)) == ["soulflow.agent.loop:4", "soulflow.cron.service:1"]
    assert _places(sdk_violations(edges)) == ["soulflow.agent.loop:1", "soulflow.agent.web:2"]
    assert _places(type_checking_violations(edges)) == ["soulflow.cron.store:3"]


def test_the_checker_finds_cycles(tmp_path: Path) -> None:
    """A loop inside one package is found, through a function's import and a package
    __init__ that imports its module; a loop closed only by an annotation is not."""
    root = tmp_path / "soulflow"
    files = {
        "tasks/__init__.py": "from soulflow.tasks.engine import Engine\n",
        "tasks/engine.py": "from soulflow.tasks import model\n",
        "tasks/model.py": "def f():\n    from soulflow.tasks.engine import Engine\n",
        "agent/a.py": "from typing import TYPE_CHECKING\nfrom soulflow.agent import b\n"
                      "if TYPE_CHECKING:\n    from soulflow.agent.c import C\n",
        "agent/b.py": "from soulflow.agent.a import A\n",
        "agent/c.py": "from soulflow.agent.a import A\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "agent/__init__.py").write_text("")
    modules = [module_name(path, root) for path in root.rglob("*.py")]
    edges = all_edges(root)
    assert import_cycles(edges, modules) == [
        "soulflow.agent.a:2 -> soulflow.agent.b:1 -> soulflow.agent.a "
        "(cycle of soulflow.agent.a, soulflow.agent.b)",
        "soulflow.tasks:1 -> soulflow.tasks.engine:1 -> soulflow.tasks "
        "(cycle of soulflow.tasks, soulflow.tasks.engine, soulflow.tasks.model)",
    ]


def _places(violations: list[str]) -> list[str]:
    return sorted({line.split(" ")[0] for line in violations})
