"""The vault's sealed entries on Redis: one hash, `vault:secrets` (name → json ``{ciphertext,
updated_at, scope?}``, the fields of ``secrets.json``'s entries). Ciphertexts only: the key
stays on each node's disk (`SOULFLOW_MASTER_KEY_FILE`) and never reaches Redis, so a secret
sealed on node A opens on node B only because both hold the same key file.

Storing several values (with the "leave another scope's name alone" rule) and deleting one
(only if it has the expected scope) are Lua scripts; a key rotation swaps every entry in a
WATCH transaction, so an entry another node writes meanwhile aborts the swap
(`EntriesChanged`) instead of being lost or left sealed under the old key.

`vault:key_check` holds a fingerprint of the key the entries are sealed with (an HMAC under a
subkey derived from the key, of a fixed text: it reveals nothing of the key), so a node
started with another key file says so at startup (`SecretVault.key_problem`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from redis.client import Pipeline

from soulflow.backends.base import EntriesChanged
from soulflow.backends.redis.clients import SyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text
from soulflow.security.vault_records import StoredSecret, entry_json, parse_entry

__all__ = ["RedisSecretEntries"]

log = logging.getLogger(__name__)

# KEYS: hash. ARGV: keep_foreign ('1'/'0'), then name, record json pairs. A record's scope
# (absent: global) must match the stored one for a name to be replaced under keep_foreign.
# Returns the names left alone.
VAULT_PUT = """
local function scope_of(raw)
  local scope = cjson.decode(raw).scope
  if type(scope) ~= 'string' then return '' end
  return scope
end
local refused = {}
for i = 2, #ARGV, 2 do
  local keep = false
  if ARGV[1] == '1' then
    local old = redis.call('HGET', KEYS[1], ARGV[i])
    keep = old and scope_of(old) ~= scope_of(ARGV[i + 1])
  end
  if keep then
    table.insert(refused, ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return refused
"""

# KEYS: hash. ARGV: name, any_scope ('1'/'0'), scope ('' for global). 1 if deleted.
VAULT_DELETE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
if ARGV[2] == '0' then
  local scope = cjson.decode(raw).scope
  if type(scope) ~= 'string' then scope = '' end
  if scope ~= ARGV[3] then return 0 end
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


class RedisSecretEntries:
    """`SecretEntries` on Redis (see the module docstring)."""

    shared = True

    def __init__(self, state: StateRedis) -> None:
        self._client: SyncStoreRedis = state.client
        self._key = ServiceKeys(state.prefix).vault
        self._key_check = ServiceKeys(state.prefix).vault_key_check
        self._put = self._client.register_script(VAULT_PUT)
        self._delete = self._client.register_script(VAULT_DELETE)

    @property
    def location(self) -> str:
        return f"the Redis hash {self._key}"

    def key_fingerprint(self, mine: str) -> str:
        self._client.set(self._key_check, mine, nx=True)
        recorded = self._client.get(self._key_check)
        return mine if recorded is None else text(recorded)

    def read(self) -> dict[str, StoredSecret]:
        return self._parse_all(self._client.hgetall(self._key))

    def put(self, entries: Mapping[str, StoredSecret], *, keep_foreign: bool) -> list[str]:
        if not entries:
            return []
        args: list[str] = ["1" if keep_foreign else "0"]
        for name, entry in entries.items():
            args += [name, json.dumps(entry_json(entry))]
        return [text(name) for name in self._put(keys=[self._key], args=args)]

    def delete(self, name: str, *, scope: str | None, any_scope: bool) -> bool:
        return bool(self._delete(keys=[self._key],
                                 args=[name, "1" if any_scope else "0", scope or ""]))

    def replace(self, expected: Mapping[str, StoredSecret],
                entries: Mapping[str, StoredSecret], *, key_fingerprint: str) -> None:
        def swap(pipe: Pipeline) -> None:
            if self._parse_all(pipe.hgetall(self._key)) != dict(expected):
                raise EntriesChanged(
                    f"a secret in {self.location} changed while the key was being rotated "
                    "(another node wrote it); nothing was re-encrypted: run the rotation again")
            pipe.multi()
            pipe.delete(self._key)
            if entries:
                pipe.hset(self._key, mapping={n: json.dumps(entry_json(e))
                                              for n, e in entries.items()})
            pipe.set(self._key_check, key_fingerprint)

        self._client.transaction(swap, self._key)

    def _parse_all(self, raw: Mapping[bytes, bytes]) -> dict[str, StoredSecret]:
        entries: dict[str, StoredSecret] = {}
        for field, value in raw.items():
            name = text(field)
            try:
                entry = parse_entry(name, json.loads(value))
            except ValueError:
                entry = None
            if entry is None:  # reported, left in place: never silently dropped
                log.error("vault: the entry %r in %s is malformed; it is ignored until it is "
                          "set again", name[:60], self.location)
                continue
            entries[name] = entry
        return entries
