"""`soulflow secret set|list|rm|rotate-key`.

The vault serialises writers with its own file lock and re-reads its file on every
operation, so these commands are safe while the daemon runs.
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
    vault = SecretVault(settings.runtime_dir / "security")
    action = args.secret_command
    if action == "set":
        try:
            value = _read_value(args.name)
        except ValueError as exc:
            print(f"soulflow: error: {exc}", file=sys.stderr)
            return 1
        vault.set(args.name, value)
        print(f"Stored {args.name}. Refer to it as {{{{secret:{args.name}}}}}.")
    elif action == "list":
        names = vault.names()
        print("\n".join(names) if names else "The vault is empty.")
    elif action == "rm":
        if not vault.remove(args.name):
            print(f"soulflow: error: there is no secret named {args.name}", file=sys.stderr)
            return 1
        print(f"Removed {args.name}.")
    else:
        count = vault.rotate_key()
        print(f"New master key; re-encrypted {count} secret(s).")
    return 0
