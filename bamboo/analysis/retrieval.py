"""Similar past incidents by meaning: embed what the task says, search the sections accumulation writes.

Only sections that are written are queried — Symptom (the error dialog) and Task_Context (the task
name); an earlier version queried sections nobody wrote, and so never found anything. The second step
fetches each hit's incident summary from the `graphs` table.
"""

from __future__ import annotations

from bamboo.analysis.contract import SimilarIncident, TaskClues
from bamboo.analysis.queries import graph_summaries
from bamboo.embeddings.base import Embedder
from bamboo.store.knowledge import KnowledgeStore


async def similar_incidents(clues: TaskClues, store: KnowledgeStore, pool, embedder: Embedder,
                            k: int = 5) -> list[SimilarIncident]:
    queries: list[tuple[str, str]] = [("Symptom", c.text) for c in clues.of_type("symptom") if c.text.strip()]
    queries += [("Task_Context", text) for text in clues.prose.values() if text.strip()]
    if not queries:
        return []
    vectors = await embedder.embed([text for _, text in queries])
    best: dict[str, SimilarIncident] = {}
    for (section, _), vec in zip(queries, vectors):
        for hit in await store.search_passages(vec, k=k, section=section):
            current = best.get(hit.graph_id)
            if current is None or hit.score > current.score:
                best[hit.graph_id] = SimilarIncident(graph_id=hit.graph_id, score=round(hit.score, 4),
                                                     matched_section=section, matched_text=hit.content[:300])
    ranked = sorted(best.values(), key=lambda s: (-s.score, s.graph_id))[:k]
    summaries = await graph_summaries(pool, [s.graph_id for s in ranked])
    for s in ranked:
        s.summary = summaries.get(s.graph_id, "")[:600]
    return ranked
