"""The embedded default stack: Temporal dev server, Postgres with pgvector, and a worker, from pip packages only."""
