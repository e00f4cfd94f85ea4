"""The secret vault: named values encrypted at rest under one local master key.

Layout of ``security_dir`` (mode 0700):

* ``master.key`` - 32 random bytes, mode 0600. Refused if group/others can touch it.
* ``secrets.json`` - ``{"version": 1, "secrets": {NAME: {"ciphertext": TOKEN, "updated_at": ISO}}}``
  where TOKEN is ``sv1.<nonce>.<ciphertext+tag>`` sealed with AES-256-GCM and NAME as
  associated data (see `soulflow.security.crypto`). An entry may carry ``"scope":
  "<provider>:<chat_id>"``: it was sealed in that chat and opens only in runs of that chat.
  Entries without a scope (the operator's ``soulflow secret set``, and every entry written
  before scopes existed) are global.
* ``master.key.new`` - exists only while a key rotation is in flight (see `rotate_key`).
* ``.vault.lock`` - advisory lock so the daemon and the CLI do not lose each other's writes.

The key may live elsewhere (``SOULFLOW_MASTER_KEY_FILE``: pass ``key_path``); the vault file
and the lock always stay in ``security_dir``.

The entries are the backend's (`SecretEntries`, backends/base.py): ``secrets.json``
(backends/file/vault.py) or, with the Redis backend, a Redis hash; the key still comes from
this node's disk and never goes to Redis, so every node must hold the same key file. A key
rotation on one node re-encrypts the entries in Redis; the new key file must then be copied to
the other nodes (their vaults re-read the key file when it changes), see docs/operations.md.

Scopes: every read takes an optional ``chat`` (a `chat_scope` string). ``chat=None`` is the
operator's view (everything); with a chat, entries scoped to another chat behave exactly as if
they did not exist (`SecretNotFound`), so a run cannot even learn that a name is used elsewhere.

Every operation re-reads ``secrets.json`` under the lock: operations are rare and small, and
this keeps several processes (daemon, ``soulflow secret set``) consistent without a cache
invalidation protocol. Nothing is ever silently discarded: a corrupt file is moved aside and
reported, a missing key with existing secrets is an error rather than a fresh empty vault.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

from soulflow.backends.base import EntriesChanged, Offload, SecretEntries, call_here
from soulflow.security import syntax
from soulflow.security.crypto import Sealer, generate_key
from soulflow.security.errors import (
    InvalidCiphertext,
    KeyRecoveryError,
    MissingKeyError,
    SecretNotFound,
)
from soulflow.security.keyfile import ensure_private_dir, read_key, write_key
from soulflow.security.vault_records import (
    SecretInfo,
    StoredSecret,
    chat_scope,
    now_iso,
)
from soulflow.storage.atomic import fsync_dir, replace_durably

__all__ = ["SecretInfo", "SecretVault", "StoredSecret", "chat_scope"]

P = ParamSpec("P")
R = TypeVar("R")

try:  # POSIX advisory locking; elsewhere the in-process lock is all we get.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

KEY_FILE = "master.key"
KEY_CHECK = "soulflow vault key check"  # what the key's recorded fingerprint is a hash of
PENDING_KEY_FILE = "master.key.new"
SECRETS_FILE = "secrets.json"
LOCK_FILE = ".vault.lock"


class SecretVault:
    """Encrypted name -> value store; see the module docstring for the on-disk contract.

    Thread-safe (one `threading.Lock`) and multi-process safe on POSIX (``flock``). All
    methods are synchronous. The daemon's event loop calls none of them directly: it runs
    what reads or writes the entries through `offload` (on Redis each is a round trip, and
    one held by a slow Redis would hold the loop; the lock would too, while a call in
    another thread waits for Redis under it).
    """

    def __init__(self, security_dir: Path, key_path: Path | None = None, *,
                 entries: SecretEntries, offload: Offload | None = None) -> None:
        self.dir = Path(security_dir)
        self.key_path = Path(key_path) if key_path is not None else self.dir / KEY_FILE
        self.pending_key_path = self.key_path.with_name(self.key_path.name + ".new")
        self.secrets_path = self.dir / SECRETS_FILE
        self._entries = entries
        self._offload: Offload = offload or call_here
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, int, int, int], Sealer] | None = None
        ensure_private_dir(self.dir)
        if self.key_path.parent != self.dir:
            ensure_private_dir(self.key_path.parent)
        # shared entries (Redis) sealed with another key than this node's: why, for the log
        # and the daemon's problems (secrets sealed elsewhere will not open here)
        self.key_problem: str | None = None
        with self._locked():
            sealer = self._sealer()  # create or vet the key now: fail at startup, not later
            if self._entries.shared:
                self._check_shared_key(sealer)

    def __repr__(self) -> str:
        return f"SecretVault({str(self.dir)!r})"

    # ----------------------------------------------------------------- public API

    async def offload(self, call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run `call` (a method of this vault, or a function that calls several) where the
        entries' store may wait: the backend's store thread on Redis, right here on files
        (`Backend.offload`). Every method holds the vault's own lock, so running them in
        another thread needs nothing more."""
        return await self._offload(call, *args, **kwargs)

    def set(self, name: str, value: str, *, scope: str | None = None) -> None:
        """Store (or replace) ``value`` under ``name``; ``scope`` None makes it global."""
        self.set_many({name: value}, scope=scope)

    def set_many(self, values: Mapping[str, str], *, scope: str | None = None,
                 keep_foreign: bool = False) -> list[str]:
        """Store several values with a single read-modify-write of ``secrets.json``.

        With ``keep_foreign``, a name already stored under another scope is left alone (a chat
        may not overwrite the operator's or another chat's secret); those names are returned.
        """
        for name, value in values.items():
            syntax.validate_secret_name(name)
            if not isinstance(value, str):
                raise TypeError(f"secret {name!r} must be a str, not {type(value).__name__}")
        if not values:
            return []
        with self._locked():
            sealer = self._sealer()
            now = now_iso()
            return self._entries.put(
                {name: StoredSecret(sealer.encrypt(name, value), now, scope)
                 for name, value in values.items()}, keep_foreign=keep_foreign)

    def get(self, name: str, *, chat: str | None = None) -> str:
        """Decrypt the value stored under ``name``; raise `SecretNotFound` if absent (or
        scoped to a chat other than ``chat``)."""
        syntax.validate_secret_name(name)
        with self._locked():
            entry = self._read_entries().get(name)
            if entry is None or not entry.visible_in(chat):
                raise SecretNotFound(name)
            return self._sealer().decrypt(name, entry.ciphertext)

    def has(self, name: str, *, chat: str | None = None) -> bool:
        """True if a value is stored under ``name`` and visible in ``chat``."""
        if not syntax.is_valid_name(name):
            return False
        with self._locked():
            entry = self._read_entries().get(name)
            return entry is not None and entry.visible_in(chat)

    def names(self, *, chat: str | None = None) -> list[str]:
        """All stored names visible in ``chat`` (all of them for ``None``), sorted."""
        with self._locked():
            entries = self._read_entries()
        return sorted(n for n, e in entries.items() if e.visible_in(chat))

    def info(self, name: str) -> SecretInfo | None:
        """Name, update time and scope of one entry (the operator's view), or None."""
        if not syntax.is_valid_name(name):
            return None
        with self._locked():
            entry = self._read_entries().get(name)
        return None if entry is None else SecretInfo(name, entry.updated_at, entry.scope)

    def describe(self, *, chat: str | None = None) -> list[SecretInfo]:
        """Name, update time and scope of every entry visible in ``chat``; decrypts nothing."""
        with self._locked():
            entries = self._read_entries()
        return [SecretInfo(n, entries[n].updated_at, entries[n].scope)
                for n in sorted(entries) if entries[n].visible_in(chat)]

    def remove(self, name: str, *, scope: str | None = None, any_scope: bool = True) -> bool:
        """Delete ``name``; return whether it existed.

        ``any_scope=False`` deletes only an entry whose scope is exactly ``scope`` (how a
        chat that is not an admin removes its own secrets and nothing else).
        """
        if not syntax.is_valid_name(name):
            return False
        with self._locked():
            return self._entries.delete(name, scope=scope, any_scope=any_scope)

    def encrypt(self, name: str, value: str) -> str:
        """Seal ``value`` under ``name`` with the vault key without storing it.

        Embed the result as ``{{secret:NAME:TOKEN}}`` to carry a value inside text.
        """
        syntax.validate_secret_name(name)
        with self._locked():
            return self._sealer().encrypt(name, value)

    def decrypt(self, name: str, token: str, *, chat: str | None = None) -> str:
        """Open a token sealed under ``name``; raise `InvalidCiphertext` on any failure.

        With ``chat``, a token whose name belongs to another chat's entry is `SecretNotFound`:
        a token copied out of chat A must not open in chat B.
        """
        syntax.validate_secret_name(name)
        with self._locked():
            entry = self._read_entries().get(name)
            if entry is not None and not entry.visible_in(chat):
                raise SecretNotFound(name)
            return self._sealer().decrypt(name, token)

    def name_for_token(self, token: str, *, chat: str | None = None) -> str | None:
        """The entry visible in ``chat`` whose stored ciphertext is exactly ``token`` (how bare
        tokens resolve)."""
        with self._locked():
            for name, entry in self._read_entries().items():
                if entry.ciphertext == token and entry.visible_in(chat):
                    return name
        return None

    def fingerprint(self, value: str) -> str:
        """12 hex chars identifying ``value`` under this key without revealing it."""
        with self._locked():
            return self._sealer().fingerprint(value)

    @staticmethod
    def is_valid_token(text: object) -> bool:
        """True if ``text`` is shaped like an ``sv1.`` token (does not check the key)."""
        return syntax.is_valid_token(text)

    def rotate_key(self) -> int:
        """Replace the master key and re-encrypt every secret; return how many.

        Crash-safe ordering - at every instant some key on disk opens ``secrets.json``:

        1. decrypt everything with the old key (any failure aborts before touching disk);
        2. durably write the new key to ``master.key.new`` (``master.key`` is untouched);
        3. atomically replace ``secrets.json`` with entries sealed under the new key;
        4. atomically rename ``master.key.new`` over ``master.key``.

        A crash before 3 leaves old key + old secrets (the stray ``.new`` is discarded on
        next open); a crash between 3 and 4 leaves the new secrets with the new key still in
        ``master.key.new``, and the next open finishes the rename. The old key is destroyed.
        Shared entries (Redis) are swapped in one transaction; if another node wrote one
        since step 1, nothing is swapped, ``master.key.new`` is removed and `EntriesChanged`
        says to run the rotation again.
        """
        with self._locked():
            old = self._sealer()
            entries = self._entries.read()
            plain = {n: old.decrypt(n, e.ciphertext) for n, e in entries.items()}
            new_key = generate_key()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.pending_key_path)  # our lock is held: any leftover is stale
            write_key(self.pending_key_path, new_key)
            new = Sealer(new_key)
            try:
                self._write_entries(entries, {
                    n: StoredSecret(new.encrypt(n, plain[n]), entries[n].updated_at,
                                    entries[n].scope) for n in entries},
                    key_fingerprint=new.fingerprint(KEY_CHECK))
            except EntriesChanged:
                os.unlink(self.pending_key_path)
                raise
            self._commit_pending_key()
            log.info("vault key rotated; %d secret(s) re-encrypted", len(entries))
            return len(entries)

    # ----------------------------------------------------------------- internals

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if fcntl is None:
                yield
                return
            fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def _sealer(self) -> Sealer:
        """The sealer for the current key, re-read whenever the key file changes on disk."""
        if self.pending_key_path.exists():
            self._recover_interrupted_rotation()
        try:
            st = os.stat(self.key_path)
        except FileNotFoundError:
            self._create_key()
            st = os.stat(self.key_path)
        signature = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)
        if self._cached is None or self._cached[0] != signature:
            self._cached = (signature, Sealer(read_key(self.key_path)))
        return self._cached[1]

    def _create_key(self) -> None:
        if self._entries.read():
            raise MissingKeyError(
                f"{self.key_path} is missing but {self._entries.location} holds secrets; "
                "restore master.key from backup or copy it from another node (or move the "
                "secrets away to start an empty vault)."
            )
        try:
            write_key(self.key_path, generate_key())
            log.info("created vault key %s", self.key_path)
        except FileExistsError:
            pass  # another process created it first; use theirs

    def _commit_pending_key(self) -> None:
        replace_durably(self.pending_key_path, self.key_path)

    def _recover_interrupted_rotation(self) -> None:
        """Finish or discard a rotation a crash left half-done (see `rotate_key`)."""
        entries = self._entries.read()

        def opens_all(path: Path) -> bool:
            if not path.exists():
                return False
            sealer = Sealer(read_key(path))
            try:
                for name, entry in entries.items():
                    sealer.decrypt(name, entry.ciphertext)
            except InvalidCiphertext:
                return False
            return True

        if self.key_path.exists() and opens_all(self.key_path):
            os.unlink(self.pending_key_path)
            fsync_dir(self.dir)
            log.warning("discarded %s left by an unfinished key rotation", self.pending_key_path)
        elif opens_all(self.pending_key_path):
            self._commit_pending_key()
            log.warning("completed an interrupted key rotation using %s", self.pending_key_path)
        else:
            raise KeyRecoveryError(
                f"neither {self.key_path.name} nor {self.pending_key_path.name} decrypts "
                f"{self._entries.location}; keep all three and restore from backup."
            )
        self._cached = None

    def _read_entries(self) -> dict[str, StoredSecret]:
        return self._entries.read()

    def _write_entries(self, expected: Mapping[str, StoredSecret],
                       entries: Mapping[str, StoredSecret], *, key_fingerprint: str) -> None:
        """Step 3 of a rotation: every entry re-sealed, swapped at once."""
        self._entries.replace(expected, entries, key_fingerprint=key_fingerprint)

    def _check_shared_key(self, sealer: Sealer) -> None:
        """Is this node's key the one the shared entries are sealed with? A node that holds
        another key (a fresh one it made, a stale one from before a rotation) is reported
        at startup instead of failing on each secret later. The first node records its key's
        fingerprint, provided its key opens an entry already stored."""
        mine = sealer.fingerprint(KEY_CHECK)
        entries = self._entries.read()
        sample = next(iter(entries.items()), None)
        if sample is not None and not self._opens(sealer, *sample):
            recorded = ""
        else:
            recorded = self._entries.key_fingerprint(mine)
        if recorded != mine:
            self.key_problem = (
                f"this node's vault key {self.key_path} is not the key the secrets in "
                f"{self._entries.location} are sealed with, so they will not open here: copy "
                "the key file from another node (the same key on every node)")
            log.error("vault: %s", self.key_problem)

    @staticmethod
    def _opens(sealer: Sealer, name: str, entry: StoredSecret) -> bool:
        try:
            sealer.decrypt(name, entry.ciphertext)
        except InvalidCiphertext:
            return False
        return True
