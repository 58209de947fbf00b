"""Plain-text work that any layer may use: sentences and pieces of Markdown, content words.

Below agent, ingest and retrieval: it imports nothing of the service's."""
