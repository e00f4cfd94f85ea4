"""Several `soulflow run` daemons, each in a workspace of its own (as on separate machines),
built for the multi-node tests on one Redis: a node is named by `SOULFLOW_NODE_ID`, so the same
name restarted is the same node again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.e2e.harness import Daemon, daemon_factory

NODE_NAMES = ("node-a", "node-b")


@contextmanager
def node_daemons(tmp_path: Path, llm_url: str, names: tuple[str, ...] = NODE_NAMES, *,
                 per_node: Callable[[str], dict[str, str]] | None = None,
                 **settings: str) -> Iterator[dict[str, Daemon]]:
    """Daemons by name (not started), each in `tmp_path/<name>` with `settings` plus
    `per_node(name)`; all stopped and cleaned up on the way out."""
    with ExitStack() as stack:
        nodes: dict[str, Daemon] = {}
        for name in names:
            (tmp_path / name).mkdir()
            own = per_node(name) if per_node is not None else {}
            factory = stack.enter_context(daemon_factory(
                tmp_path / name, llm_url, SOULFLOW_NODE_ID=name, **settings, **own))
            nodes[name] = factory()
        yield nodes
