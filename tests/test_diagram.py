"""Mermaid rendering for the diagram_render tool (soulflow.agent.diagram).

Tests marked `requires_node_renderer` run the real renderer and need Node.js plus
`npm ci --prefix soulflow/agent/diagram`; when that is missing they fail (not skip) with the
command to run. The others drive `render_mermaid` with small fake "node" executables so the
process handling (timeouts, crashes, caps, environment) is checked without Node.js.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from soulflow.agent.diagram import render as render_module
from soulflow.agent.diagram.render import (
    INSTALL_COMMAND,
    MAX_SOURCE_BYTES,
    NODE_MISSING,
    PACKAGE_DIR,
    DiagramError,
    render_mermaid,
    renderer_status,
)
from tests.waiting import until

F = TypeVar("F", bound=Callable[..., object])

FLOWCHART = """\
graph TD
  A[Start] --> B{Approved?}
  B -->|yes| C[Deploy Größe]
  B -->|no| D[Fix it]
"""

SEQUENCE = """\
sequenceDiagram
  Alice->>Bob: Hello Bob
  Bob-->>Alice: Hi Alice
"""


def requires_node_renderer(test: F) -> F:
    """Mark a test as needing the real renderer and fail it clearly when that is missing."""
    marked = pytest.mark.usefixtures("node_renderer")(test)
    return pytest.mark.requires_node_renderer(marked)


@pytest.fixture
def node_renderer() -> None:
    status = renderer_status()
    if status is not None:
        pytest.fail(
            f"the Mermaid renderer is not usable: {status} "
            "(to leave these tests out: -m 'not requires_node_renderer')",
            pytrace=False,
        )


def _chain(n: int) -> str:
    """A valid flowchart with `n` nodes and crossing edges: slow to lay out, small to send."""
    return "graph TD\n" + "".join(f"  N{i} --> N{(i * 7 + 3) % n}\n" for i in range(n))


# ---------------------------------------------------------------------------------------------
# The real renderer
# ---------------------------------------------------------------------------------------------


@requires_node_renderer
async def test_flowchart_renders_svg_and_ascii_with_labels() -> None:
    result = await render_mermaid(FLOWCHART)
    assert result.svg is not None and result.ascii is not None
    assert result.svg.lstrip().startswith("<svg")
    for label in ("Start", "Approved?", "Deploy Größe", "Fix it", "yes", "no"):
        assert label in result.svg
        assert label in result.ascii
    assert "fonts.googleapis.com" not in result.svg  # viewers must not fetch third-party fonts


@requires_node_renderer
async def test_sequence_diagram() -> None:
    result = await render_mermaid(SEQUENCE)
    assert result.svg is not None and "<svg" in result.svg
    assert result.ascii is not None
    for text in ("Alice", "Bob", "Hello Bob", "Hi Alice"):
        assert text in result.svg
        assert text in result.ascii


@requires_node_renderer
@pytest.mark.parametrize(
    ("source", "labels"),
    [
        ("classDiagram\n  Animal <|-- Duck\n  Animal : +int age\n", ["Animal", "Duck", "age"]),
        ("stateDiagram-v2\n  [*] --> Idle\n  Idle --> Busy : start\n", ["Idle", "Busy", "start"]),
        ("erDiagram\n  CUSTOMER ||--o{ ORDER : places\n", ["CUSTOMER", "ORDER", "places"]),
    ],
    ids=["class", "state", "er"],
)
async def test_other_diagram_types(source: str, labels: list[str]) -> None:
    result = await render_mermaid(source)
    assert result.svg is not None and result.ascii is not None
    for label in labels:
        assert label in result.svg
        assert label in result.ascii


@requires_node_renderer
async def test_only_the_requested_format_is_rendered() -> None:
    result = await render_mermaid(FLOWCHART, formats=["ascii"])
    assert result.svg is None
    assert result.ascii is not None and "Start" in result.ascii


@requires_node_renderer
async def test_wrappers_models_write_are_accepted() -> None:
    source = "```mermaid\n---\ntitle: t\n---\n%% note\nsequenceDiagram;\n  A->>B: ping\n```\n"
    result = await render_mermaid(source, formats=["ascii"])
    assert result.ascii is not None and "ping" in result.ascii


@requires_node_renderer
async def test_semicolon_separated_statements_all_render() -> None:
    result = await render_mermaid("graph LR; A --> B; B --> C", formats=["ascii"])
    assert result.ascii is not None
    assert all(name in result.ascii for name in ("A", "B", "C"))


@requires_node_renderer
async def test_theme_is_applied_and_unknown_theme_is_refused() -> None:
    result = await render_mermaid(FLOWCHART, formats=["svg"], theme="dracula")
    assert result.svg is not None and "#282a36" in result.svg
    with pytest.raises(DiagramError, match="Unknown theme"):
        await render_mermaid(FLOWCHART, theme="no-such-theme")


@requires_node_renderer
async def test_unsupported_diagram_type_names_the_line_and_what_is_supported() -> None:
    with pytest.raises(DiagramError) as info:
        await render_mermaid('\n%% comment\npie title Pets\n  "Dogs" : 3\n')
    message = str(info.value)
    assert '"pie title Pets" on line 3' in message
    assert "sequenceDiagram" in message


@requires_node_renderer
async def test_arrow_glued_to_node_is_an_error_not_a_wrong_picture() -> None:
    with pytest.raises(DiagramError, match=r'^Line 3: could not read the link in "B-->C"; '):
        await render_mermaid("graph TD\n  A --> B\n  B-->C\n")


@requires_node_renderer
async def test_large_valid_diagram_times_out_and_is_killed() -> None:
    # ~34 KB and about 25 s of layout: far beyond the 0.5 s allowed on any machine.
    ours = psutil.Process()
    before = set(ours.children(recursive=True))
    with pytest.raises(DiagramError, match=r"longer than 0\.5 seconds"):
        await render_mermaid(_chain(2000), formats=["svg"], timeout_s=0.5)
    # the renderer was killed and reaped, not left laying the diagram out
    assert set(ours.children(recursive=True)) - before == set()


@requires_node_renderer
async def test_out_of_memory_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_module, "NODE_HEAP_MB", 48)  # so the crash comes in about 1 s
    with pytest.raises(DiagramError, match="too large to render within 48 MB"):
        await render_mermaid(_chain(200), formats=["ascii"], timeout_s=60)


# ---------------------------------------------------------------------------------------------
# Checks done before any process is started
# ---------------------------------------------------------------------------------------------


async def test_oversize_input_is_refused() -> None:
    source = "graph TD\n" + "  A --> B\n" * (MAX_SOURCE_BYTES // 10 + 1)
    with pytest.raises(DiagramError, match="over the 50 KB limit"):
        await render_mermaid(source)


async def test_empty_source_is_refused() -> None:
    with pytest.raises(DiagramError, match="empty"):
        await render_mermaid("  \n ")


async def test_unknown_format_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="formats"):
        await render_mermaid(FLOWCHART, formats=["png"])


async def test_missing_node_is_explained() -> None:
    with pytest.raises(DiagramError) as info:
        await render_mermaid(FLOWCHART, node="/nonexistent/node")
    assert str(info.value) == NODE_MISSING
    assert renderer_status(node="/nonexistent/node") == NODE_MISSING


async def test_missing_node_modules_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(render_module, "_installed_package_json", lambda: tmp_path / "nope")
    # Any executable passes the Node.js check; the install check must come next.
    with pytest.raises(DiagramError) as info:
        await render_mermaid(FLOWCHART, node=sys.executable)
    assert f"npm ci --prefix {PACKAGE_DIR}" in str(info.value)
    assert INSTALL_COMMAND.endswith(str(PACKAGE_DIR))


# ---------------------------------------------------------------------------------------------
# Process handling, with fake "node" executables (no Node.js needed)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fake_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], str]:
    """Build an executable Python script to pass as `node=`; it ignores its arguments."""
    installed = tmp_path / "package.json"
    installed.write_text("{}")
    monkeypatch.setattr(render_module, "_installed_package_json", lambda: installed)

    def make(body: str) -> str:
        script = tmp_path / "fake-node"
        script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
        script.chmod(0o755)
        return str(script)

    return make


async def test_timeout_kills_the_process(fake_node: Callable[[str], str], tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    node = fake_node(
        f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
        """
    )
    with pytest.raises(DiagramError, match=r"longer than 0\.5 seconds"):
        await render_mermaid(FLOWCHART, node=node, timeout_s=0.5)
    with pytest.raises(ProcessLookupError):  # killed and reaped, well before its 60 s
        os.kill(int(pid_file.read_text()), 0)


async def test_cancelling_the_call_kills_the_process(
    fake_node: Callable[[str], str], tmp_path: Path
) -> None:
    # The tool registry cancels a running tool when the user aborts the turn.
    pid_file = tmp_path / "pid"
    node = fake_node(
        f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
        """
    )
    task = asyncio.create_task(render_mermaid(FLOWCHART, node=node, timeout_s=60))
    await until(lambda: pid_file.exists() and bool(pid_file.read_text()), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


async def test_renderer_error_reply_is_raised_verbatim(fake_node: Callable[[str], str]) -> None:
    node = fake_node('print(\'{"ok": false, "error": "Line 2: something is off."}\')')
    with pytest.raises(DiagramError, match=r"^Line 2: something is off\.$"):
        await render_mermaid(FLOWCHART, node=node)


async def test_crash_is_reported_with_the_last_stderr_line(fake_node: Callable[[str], str]) -> None:
    node = fake_node("import sys\nsys.stderr.write('stack\\nTypeError: boom\\n')\nsys.exit(1)\n")
    with pytest.raises(DiagramError, match=r"crashed \(exit status 1\): TypeError: boom$"):
        await render_mermaid(FLOWCHART, node=node)


async def test_garbage_output_is_reported(fake_node: Callable[[str], str]) -> None:
    node = fake_node("print('hello')\n")
    with pytest.raises(DiagramError, match="not a JSON object"):
        await render_mermaid(FLOWCHART, node=node)


async def test_svg_over_2_mb_is_refused(fake_node: Callable[[str], str]) -> None:
    node = fake_node(
        """
        import json
        print(json.dumps({"ok": True, "svg": "<svg>" + "x" * (2 * 1024 * 1024), "ascii": ""}))
        """
    )
    with pytest.raises(DiagramError, match="SVG is 2.0 MB, over the 2 MB limit"):
        await render_mermaid(FLOWCHART, node=node)


async def test_endless_output_is_cut_off(fake_node: Callable[[str], str]) -> None:
    node = fake_node(
        """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """
    )
    with pytest.raises(DiagramError, match="larger than the output limit"):
        await render_mermaid(FLOWCHART, node=node, timeout_s=30)


async def test_renderer_gets_the_request_a_minimal_env_and_the_package_cwd(
    fake_node: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOULFLOW_TEST_SECRET", "hunter2")
    node = fake_node(
        """
        import json, os, sys
        request = json.load(sys.stdin)
        seen = {"request": request, "env": dict(os.environ), "cwd": os.getcwd()}
        print(json.dumps({"ok": True, "ascii": json.dumps(seen)}))
        """
    )
    result = await render_mermaid(FLOWCHART, node=node, formats=["ascii", "ascii"], theme="nord")
    assert result.svg is None and result.ascii is not None
    seen = json.loads(result.ascii)
    assert seen["request"] == {"source": FLOWCHART, "formats": ["ascii"], "theme": "nord"}
    assert "SOULFLOW_TEST_SECRET" not in seen["env"]
    assert set(seen["env"]) <= {"PATH", "LANG", "LC_CTYPE"}
    assert Path(seen["cwd"]) == PACKAGE_DIR
