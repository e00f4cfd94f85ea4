"""Durable message bus: inbound journal, outbox, dispatcher and dead-letter queue."""
