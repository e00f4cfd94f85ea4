"""The outbound bus: the outbox writer, the dispatcher that sends per chat in order, retries
with backoff, and the traffic pacing. `bus.MessageBus` ties them to the backend's stores."""
