"""SoulFlow security: secrets are sealed on arrival and opened only inside tool execution.

Modules, one concern each:

* `errors` - the exception hierarchy (`SecurityError`, the base of the package's errors).
* `syntax` - secret names, ``{{secret:...}}`` references and ``sv1.`` ciphertext tokens.
* `crypto` - AES-256-GCM with the secret name as associated data.
* `keyfile` - the ``master.key`` file and its private directory.
* `vault` - `SecretVault`, the encrypted store (entries may be scoped to a chat);
  `vault_records` - its on-disk records.
* `protected` - THE list of what nothing the agent runs may touch (key, vault, ``.env*``,
  ``runtime/``), for file tools and the code sandbox; where the key lives (`open_vault`).
* `detectors` - finding sensitive values in text (pure); `detection` - the shared types;
  `platform_tokens` - Telegram and Discord bot tokens.
* `seal` - moving detected values into the vault, leaving references.
* `references` - checking that referenced secrets can be opened; the user-facing message.
* `resolve` - opening references for a tool (all-or-nothing) and masking tool output.
* `redact` - blanking secrets in logs, sessions, journals, events and the dashboard;
  `redacting_provider` - the same for every request sent to a model.

Import a name from the module that defines it: this file imports none of them, so importing
one module of the package (`errors` from the store port, say) does not load the vault and the
rest with it.
"""
