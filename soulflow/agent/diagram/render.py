"""Render Mermaid source to SVG and ASCII art by running `renderer.mjs` under Node.js.

The renderer is the npm package ``beautiful-mermaid`` (pure JavaScript, no browser). It runs in a
short-lived child process rather than a long-lived one so that every diagram gets its own
wall-clock timeout and V8 heap cap: the ASCII layout in particular grows quickly with the number
of nodes, and a diagram written by the model must never be able to stall or swell the daemon.
The child talks one JSON request / one JSON reply (see the header of `renderer.mjs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from soulflow.agent.errors import AgentError

PACKAGE_DIR = Path(__file__).resolve().parent
RENDERER_SCRIPT = PACKAGE_DIR / "renderer.mjs"
RENDERER_PACKAGE = "beautiful-mermaid"
INSTALL_COMMAND = f"npm ci --prefix {PACKAGE_DIR}"

FORMATS = ("svg", "ascii")
MAX_SOURCE_BYTES = 50 * 1024
MAX_SVG_BYTES = 2 * 1024 * 1024
# A chat message can't show more than this anyway; it also bounds what we hold in memory.
MAX_ASCII_BYTES = 1024 * 1024
# The raw reply is JSON, so escaping can make it larger than the texts it carries.
_MAX_REPLY_BYTES = 2 * (MAX_SVG_BYTES + MAX_ASCII_BYTES)
_MAX_STDERR_BYTES = 16 * 1024
# Enough for ~1000-node SVGs; an ASCII layout that needs more is too big to read in a chat.
NODE_HEAP_MB = 512
MIN_NODE_MAJOR = 18
_STATUS_TIMEOUT_S = 5.0

NODE_MISSING = "Node.js is not installed; diagram_render needs it: apt-get install nodejs"


class DiagramError(AgentError):
    """A diagram could not be rendered; the message is one sentence fit to show the user."""


@dataclass(frozen=True, slots=True)
class DiagramResult:
    """The rendered diagram; a format that was not requested is None."""

    svg: str | None
    ascii: str | None


def _not_installed_message() -> str:
    return f"The diagram renderer is not installed; run `{INSTALL_COMMAND}`."


def _resolve_node(node: str) -> str | None:
    """Absolute path of the Node.js executable, looked up on this process's PATH."""
    return shutil.which(node)


def _installed_package_json() -> Path:
    return PACKAGE_DIR / "node_modules" / RENDERER_PACKAGE / "package.json"


def _check_installed(node: str) -> str:
    """Return the node executable to run, or raise the error a missing piece calls for."""
    executable = _resolve_node(node)
    if executable is None:
        raise DiagramError(NODE_MISSING)
    if not RENDERER_SCRIPT.is_file() or not _installed_package_json().is_file():
        raise DiagramError(_not_installed_message())
    return executable


def _minimal_env(executable: str) -> dict[str, str]:
    """No secrets, proxies or NODE_OPTIONS from the daemon's environment reach the renderer."""
    path = os.pathsep.join([os.path.dirname(executable), os.defpath])
    return {"PATH": path, "LANG": "C.UTF-8"}


def _validate(source: str, formats: Iterable[str]) -> tuple[str, ...]:
    """Refuse what should not reach the renderer; return the formats without duplicates."""
    wanted = tuple(dict.fromkeys(formats))
    unknown = [f for f in wanted if f not in FORMATS]
    if not wanted or unknown:
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {wanted!r}")
    if not source.strip():
        raise DiagramError("The diagram source is empty.")
    size = len(source.encode("utf-8"))
    if size > MAX_SOURCE_BYTES:
        raise DiagramError(
            f"The diagram source is {size / 1024:.0f} KB, over the "
            f"{MAX_SOURCE_BYTES // 1024} KB limit; split it into smaller diagrams."
        )
    return wanted


async def _read_capped(
    stream: asyncio.StreamReader, limit: int, proc: asyncio.subprocess.Process
) -> bytes | None:
    """Read a stream to EOF; past `limit` bytes kill the process and return None."""
    chunks: list[bytes] = []
    total = 0
    while chunk := await stream.read(64 * 1024):
        total += len(chunk)
        if total > limit:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_tail(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Drain a stream (so the child never blocks on it), keeping only its last `limit` bytes."""
    tail = b""
    while chunk := await stream.read(64 * 1024):
        tail = (tail + chunk)[-limit:]
    return tail


async def _feed(stdin: asyncio.StreamWriter, payload: bytes) -> None:
    try:
        stdin.write(payload)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died early; its exit status explains why
    finally:
        stdin.close()


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> tuple[bytes | None, bytes]:
    """Send the request and collect stdout (None if over the cap) and the tail of stderr."""
    assert proc.stdin and proc.stdout and proc.stderr
    _, out, err = await asyncio.gather(
        _feed(proc.stdin, payload),
        _read_capped(proc.stdout, _MAX_REPLY_BYTES, proc),
        _read_tail(proc.stderr, _MAX_STDERR_BYTES),
    )
    await proc.wait()
    return out, err


async def _run_renderer(
    executable: str, payload: bytes, timeout_s: float
) -> tuple[int, bytes | None, bytes]:
    """Run one renderer process; it is killed on timeout, cancellation or oversized output."""
    try:
        proc = await asyncio.create_subprocess_exec(
            executable,
            f"--max-old-space-size={NODE_HEAP_MB}",
            str(RENDERER_SCRIPT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=PACKAGE_DIR,
            env=_minimal_env(executable),
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise DiagramError(NODE_MISSING) from exc
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await _exchange(proc, payload)
    except TimeoutError:
        raise DiagramError(
            f"Rendering the diagram took longer than {timeout_s:g} seconds and was stopped; "
            "simplify it or split it into smaller diagrams."
        ) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out, err


def _crash_message(returncode: int, stderr: bytes) -> str:
    """Explain a non-zero exit: the renderer only exits non-zero when it crashed."""
    text = stderr.decode("utf-8", "replace")
    if "heap out of memory" in text or "Reached heap limit" in text:
        return (
            f"The diagram is too large to render within {NODE_HEAP_MB} MB of memory "
            "(ASCII layout is the most expensive); render it as SVG only or split it."
        )
    if "ERR_MODULE_NOT_FOUND" in text and RENDERER_PACKAGE in text:
        return _not_installed_message()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    detail = f": {lines[-1][:300]}" if lines else ""
    return f"The diagram renderer crashed (exit status {returncode}){detail}"


def _check_size(name: str, text: str | None, limit: int) -> None:
    if text is None:
        return
    size = len(text.encode("utf-8"))
    if size > limit:
        raise DiagramError(
            f"The rendered {name} is {size / 1024 / 1024:.1f} MB, over the "
            f"{limit / 1024 / 1024:g} MB limit; split the diagram into smaller ones."
        )


def _parse_reply(stdout: bytes, formats: tuple[str, ...]) -> DiagramResult:
    try:
        reply = json.loads(stdout)
    except (UnicodeDecodeError, json.JSONDecodeError):
        reply = None
    if not isinstance(reply, dict):
        raise DiagramError("The diagram renderer returned something that is not a JSON object.")
    if reply.get("ok") is not True:
        error = reply.get("error")
        raise DiagramError(str(error) if error else "The diagram renderer failed without a reason.")
    texts = {f: reply.get(f) if f in formats else None for f in FORMATS}
    if any(not isinstance(texts[f], str) for f in formats):
        raise DiagramError("The diagram renderer's reply is missing a requested format.")
    _check_size("SVG", texts["svg"], MAX_SVG_BYTES)
    _check_size("ASCII art", texts["ascii"], MAX_ASCII_BYTES)
    return DiagramResult(svg=texts["svg"], ascii=texts["ascii"])


async def render_mermaid(
    source: str,
    *,
    formats: Iterable[str] = FORMATS,
    timeout_s: float = 15,
    node: str = "node",
    theme: str | None = None,
) -> DiagramResult:
    """Render Mermaid `source` to the requested `formats` ("svg", "ascii").

    `theme` is one of beautiful-mermaid's built-in theme names (e.g. "github-dark") and only
    affects the SVG. Raises `DiagramError` with a sentence for the user when Node.js or the
    renderer is missing, the source is invalid or too large, rendering times out, or the
    output is too large; raises ValueError for an unknown format (a caller bug).
    """
    wanted = _validate(source, formats)
    executable = _check_installed(node)
    request: dict[str, object] = {"source": source, "formats": list(wanted)}
    if theme is not None:
        request["theme"] = theme
    payload = json.dumps(request).encode("utf-8")
    returncode, stdout, stderr = await _run_renderer(executable, payload, timeout_s)
    if stdout is None:
        raise DiagramError(
            "The rendered diagram is larger than the output limit "
            f"({MAX_SVG_BYTES // (1024 * 1024)} MB of SVG); split it into smaller diagrams."
        )
    if returncode != 0:
        raise DiagramError(_crash_message(returncode, stderr))
    return _parse_reply(stdout, wanted)


def _pinned_version() -> str | None:
    """The renderer version our package.json pins (an exact version)."""
    try:
        manifest = json.loads((PACKAGE_DIR / "package.json").read_text("utf-8"))
        return manifest["dependencies"][RENDERER_PACKAGE]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _installed_version() -> str | None:
    try:
        return json.loads(_installed_package_json().read_text("utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return None


def _node_major(executable: str) -> int | None:
    """Major version of Node.js, or None if `node --version` fails or says something odd."""
    try:
        done = subprocess.run(
            [executable, "--version"],
            capture_output=True,
            text=True,
            timeout=_STATUS_TIMEOUT_S,
            env=_minimal_env(executable),
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.fullmatch(r"v(\d+)\.\d+\.\d+\S*", done.stdout.strip())
    return int(match.group(1)) if match else None


def renderer_status(node: str = "node") -> str | None:
    """None when diagrams can be rendered, else why not (for a `doctor`-style check).

    Blocking (it runs `node --version`), so call it from a CLI or a worker thread, not from
    the event loop.
    """
    executable = _resolve_node(node)
    if executable is None:
        return NODE_MISSING
    major = _node_major(executable)
    if major is None:
        return f"{executable} does not run as Node.js (`node --version` failed)."
    if major < MIN_NODE_MAJOR:
        return f"Node.js {major} is too old; diagram_render needs {MIN_NODE_MAJOR} or newer."
    if not RENDERER_SCRIPT.is_file():
        return f"{RENDERER_SCRIPT} is missing; reinstall soulflow."
    installed, pinned = _installed_version(), _pinned_version()
    if installed is None:
        return _not_installed_message()
    if pinned is not None and installed != pinned:
        return (
            f"{RENDERER_PACKAGE} {installed} is installed but {pinned} is pinned; "
            f"run `{INSTALL_COMMAND}`."
        )
    return None
