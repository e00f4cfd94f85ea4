"""The conversation: from "a message was taken in" to "its turn is complete"."""
