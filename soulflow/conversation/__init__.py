"""The conversation: from "a message was taken in" to "its turn is complete".

Start at `turns` (`Conversation`): `ingest` takes in what a channel read, the claim loop hands
this node its messages, each chat's turns run one at a time, and `Conversation._answer` says
who answers. The steps, in the order a message meets them:

* `intake` - normalise, filter (own and other bots' messages, not addressed, `access`), seal,
  journal; `quarantine` - what cannot be taken in; `reactions` - stop runs, decide prompts.
* `claiming` - the "inbound:claim" loop: the work this node runs comes from the backend.
* `grouping` - a burst from one sender as one input; `folding` - what queued up behind a turn
  answered in the next one.
* `turns` - the chat's turn: a stored reply, a command (`commands`, `capability_commands`,
  `secret_command`), the chat's tasks (`chat_tasks`), the run waiting for this person, or the
  agent (`answering`, with `input_text` and `attachments`; `runs` for /stop; `feedback` for
  typing and read-acks).
* `replies` - the reply split for its platform once and stored in the outbox, then the
  inbound message completed.
"""
