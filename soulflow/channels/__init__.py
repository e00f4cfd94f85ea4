"""The platform edge: reading and sending, nothing about who answers.

* `base` - the `ChannelAdapter` contract and its `ChannelLimits`; `registry` - the adapters
  by name; `wiring` - the platform adapters the settings enable.
* `telegram/`, `slack/`, `discord/`, `local/` - one package per platform: its adapter,
  formats, HTTP, files and feedback calls; only there is a platform SDK imported.
* `reader` - one channel's read loop (connect with backoff, leadership on a shared account,
  restart when stalled), recording its `health`; `leadership`, `state` - who reads a shared
  account, and the read position it keeps.
* `splitting` - a reply cut into the parts a platform accepts (the one split);
  `normalize`, `poison`, `files`, `lenient_http`, `probe` - what every platform shares at the
  edge: text rules, unreadable updates, safe file names, lenient JSON, the doctor's records.

What was read goes to the conversation (`soulflow.conversation`); what it answers comes back
through the outbound bus to `ChannelAdapter.send`.
"""
