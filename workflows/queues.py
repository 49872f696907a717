"""Task queues: workflows on the main queue, LLM-bound and store-bound activities on their own
queues so each can be scaled and concurrency-limited separately."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Queues:
    main: str = "bamboo"
    llm: str = "bamboo-llm"
    store: str = "bamboo-store"
    sandbox: str = "bamboo-sandbox"
