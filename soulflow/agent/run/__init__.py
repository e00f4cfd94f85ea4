"""An agent run as a thread of typed events: events, reducer, timing, loop (the journal that keeps
the events is the backend's, `RunJournal`)."""
