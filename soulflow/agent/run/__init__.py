"""An agent run as a thread of typed events: reducer, store, loop."""
