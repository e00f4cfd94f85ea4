"""Checks of the workspace on disk: it exists and is writable, the key and `.env` are private.

These mirror what the daemon enforces at start (`soulflow.security.keyfile` refuses a key
readable by others; `soulflow.storage.env_file` refuses a `.env` that a tool or another
user could have written) so the operator learns about it before a restart fails, and add
what the daemon only warns about (a wide `runtime/security/`, a world-readable `.env`).
"""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from pathlib import Path

from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip, warn
from soulflow.providers.wiring import configured_provider_names
from soulflow.security.crypto import KEY_SIZE
from soulflow.security.protected import KEY_FILE_NAME, RUNTIME_DIR, SECURITY_DIR, key_file_path
from soulflow.storage.env_file import ENV_FILE_NAME, UnsafeEnvFile, read_env_text

VAULT_FILE_NAME = "secrets.json"


async def check_workspace(ctx: DoctorContext) -> list[CheckResult]:
    return await asyncio.to_thread(_workspace, ctx.workspace)


def _workspace(workspace: Path) -> list[CheckResult]:
    name = "workspace"
    if not workspace.is_dir():
        return [fail(name, f"{workspace} does not exist",
                     f"soulflow init {workspace}")]
    try:
        with tempfile.NamedTemporaryFile(dir=workspace, prefix=".soulflow-doctor-"):
            pass
    except OSError as exc:
        return [fail(name, f"{workspace} is not writable ({exc.strerror})",
                     f"sudo chown -R $(id -un) {workspace}")]
    runtime = workspace / RUNTIME_DIR
    if runtime.exists() and not os.access(runtime, os.W_OK | os.X_OK):
        return [fail(name, f"{runtime} is not writable", f"sudo chown -R $(id -un) {runtime}")]
    return [ok(name, f"{workspace} exists and is writable")]


async def check_permissions(ctx: DoctorContext) -> list[CheckResult]:
    if not ctx.workspace.is_dir():
        return [skip("permissions", "no workspace")]
    configured = str(ctx.setting("SOULFLOW_MASTER_KEY_FILE") or "")
    return await asyncio.to_thread(_permissions, ctx.workspace, configured)


def _permissions(workspace: Path, configured: str) -> list[CheckResult]:
    return [_security_dir(workspace / RUNTIME_DIR / SECURITY_DIR),
            _key(workspace, configured), _env_file(workspace)]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _security_dir(path: Path) -> CheckResult:
    name = "security dir"
    if not path.exists():
        return ok(name, f"{path} not created yet (the daemon creates it with mode 700)")
    mode = _mode(path)
    if mode & 0o077:
        return warn(name, f"{path} has mode {mode:o}: other users can list it",
                    f"chmod 700 {path}")
    return ok(name, f"{path} is private (700)")


def _key(workspace: Path, configured: str) -> CheckResult:
    name = "master key"
    path = key_file_path(workspace, configured)
    default = workspace / RUNTIME_DIR / SECURITY_DIR / KEY_FILE_NAME
    where = f"{path} (from SOULFLOW_MASTER_KEY_FILE)" if configured.strip() else str(path)
    vault = workspace / RUNTIME_DIR / SECURITY_DIR / VAULT_FILE_NAME
    if not path.exists() and not path.is_symlink():
        if configured.strip() and default.exists():
            return fail(name, f"SOULFLOW_MASTER_KEY_FILE names {path}, which does not exist, "
                              f"but {default} does",
                        f"mv {default} {path} (or clear SOULFLOW_MASTER_KEY_FILE)")
        if vault.exists():
            return fail(name, f"the vault {vault} exists but its key {where} is missing: "
                              "the secrets cannot be opened",
                        f"restore the key from your backup to {path}")
        return ok(name, f"no key yet at {where}; it is created on first use")
    if path.is_symlink():
        return fail(name, f"{where} is a symlink; the daemon refuses it",
                    f"replace it with the real file: cp --remove-destination "
                    f"\"$(readlink -f {path})\" {path} && chmod 600 {path}")
    if not path.is_file():
        return fail(name, f"{where} is not a regular file", f"restore the key to {path}")
    mode = _mode(path)
    if mode & 0o077:
        return fail(name, f"{where} has mode {mode:o}: readable by other users; the daemon "
                          "refuses to use it", f"chmod 600 {path}")
    if not os.access(path, os.R_OK):
        return fail(name, f"{where} is not readable by this user",
                    f"sudo chown $(id -un) {path}")
    size = path.stat().st_size
    if size != KEY_SIZE:
        return fail(name, f"{where} holds {size} bytes, expected {KEY_SIZE}",
                    f"restore the original key from your backup to {path}")
    return ok(name, f"{where} is private (600)")


def _env_file(workspace: Path) -> CheckResult:
    name = ".env"
    path = workspace / ENV_FILE_NAME
    try:  # the daemon's own check: it refuses to start on what fails here
        if read_env_text(workspace) is None:
            return ok(name, f"no {path} (settings come from the environment)")
    except UnsafeEnvFile as exc:
        return fail(name, exc.problem, exc.fix)
    except OSError as exc:
        return fail(name, f"{path} cannot be read ({exc.strerror or exc})",
                    f"sudo chown $(id -un) {path}")
    mode = _mode(path)
    if mode & 0o004:
        return fail(name, f"{path} has mode {mode:o}: every user can read its tokens",
                    f"chmod 600 {path}")
    if mode & 0o040:
        return warn(name, f"{path} has mode {mode:o}: the group can read its tokens",
                    f"chmod 600 {path}")
    return ok(name, f"{path} is private ({mode:o})")


async def check_settings(ctx: DoctorContext) -> list[CheckResult]:
    name = "settings"
    if ctx.settings is None:
        fix = ("edit .env (or the environment) as the message says; docs/config.md lists "
               "every setting") if ctx.workspace.is_dir() else f"soulflow init {ctx.workspace}"
        return [fail(name, ctx.settings_error or "the settings do not parse", fix)]
    configured = configured_provider_names(ctx.settings)
    provider = ctx.settings["PROVIDER"] or \
        (f"first configured, {configured[0]}" if configured else "none configured")
    return [ok(name, f"valid (provider: {provider})")]
