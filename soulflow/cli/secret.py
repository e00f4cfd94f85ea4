"""`soulflow secret set|list|rm|rotate-key`.

The vault serialises writers with its own file lock and re-reads its file on every
operation, so these commands are safe while the daemon runs. With the Redis backend the
entries are in Redis (every node's daemon sees a change at once) and the key is this node's
key file, which every node must share (`rotate-key` then needs the new key file copied to the
other nodes; see docs/operations.md). The operator is the admin of
the vault: secrets set here are global (usable in every chat), `list` shows every name with
the chat it belongs to, and `rm` removes any of them.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from soulflow.config import Settings
from soulflow.security.vault import SecretVault


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        value = getpass.getpass(f"Value for {name} (input hidden): ")
    else:
        value = sys.stdin.readline().rstrip("\r\n")
    if not value:
        raise ValueError("the value is empty; nothing was stored")
    return value


def run_secret_command(settings: Settings, args: argparse.Namespace) -> int:
    from soulflow.backends.wiring import BackendConfig, command_backend
    from soulflow.runtime.wiring import vault

    with command_backend(BackendConfig.from_settings(settings), settings.runtime_dir) as backend:
        return _run(vault(settings, backend), args, shared=backend.shared)


def _run(vault: SecretVault, args: argparse.Namespace, *, shared: bool) -> int:
    action = args.secret_command
    if action == "set":
        try:
            value = _read_value(args.name)
        except ValueError as exc:
            print(f"soulflow: error: {exc}", file=sys.stderr)
            return 1
        vault.set(args.name, value)  # no scope: the operator's secrets are global
        print(f"Stored {args.name} (global: usable in every chat). Refer to it as "
              f"{{{{secret:{args.name}}}}}.")
    elif action == "list":
        infos = vault.describe()
        lines = [f"{i.name}\t{i.scope or 'global'}" for i in infos]
        print("\n".join(lines) if lines else "The vault is empty.")
    elif action == "rm":
        if not vault.remove(args.name):
            print(f"soulflow: error: there is no secret named {args.name}", file=sys.stderr)
            return 1
        print(f"Removed {args.name}.")
    else:
        count = vault.rotate_key()
        print(f"New master key; re-encrypted {count} secret(s).")
        if shared:
            print(f"Copy {vault.key_path} to every other node now (same path there): until "
                  "then they cannot open the secrets.")
    return 0
