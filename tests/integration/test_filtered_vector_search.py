"""A filtered similarity search returns the k nearest rows *that match the filter*.

pgvector 0.6's HNSW scan yields only its `ef_search` (40) nearest candidates and the filter runs
after it: when the wanted section is rare among those, the search came back short or empty even
though the section held matching rows. These tests bury a small section under thousands of closer
rows of another section, so the index scan alone cannot find it; the filtered sections are as
large as the crowd, so the planner does prefer the index.
"""

import uuid

import numpy as np

from bamboo.store.vectors import PgVectorIndex
from bamboo.tools.vector_index import VectorItem

DIM = 384


def _near(rng: np.random.Generator, axis: int, n: int, spread: float) -> np.ndarray:
    v = np.zeros((n, DIM), dtype=np.float32)
    v[:, axis] = 1.0
    v += rng.normal(0, spread, (n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def test_a_section_buried_under_closer_rows_still_returns_k_hits(services):
    rng = np.random.default_rng(7)
    crowd, rare = _near(rng, 0, 1000, 0.02), _near(rng, 1, 1000, 0.3)
    rows = [("Cause", f"crowd {i}", v) for i, v in enumerate(crowd)] + [("Symptom", f"rare {i}", v) for i, v in enumerate(rare)]
    async with services.store.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO passages (id, graph_id, section, content, embedding) "
            "SELECT i, g, s, c, e FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::vector[]) AS t(i, g, s, c, e)",
            ([uuid.uuid4() for _ in rows], [f"g{i}" for i in range(len(rows))], [s for s, _, _ in rows],
             [c for _, c, _ in rows], [v for _, _, v in rows]))
        await conn.execute("ANALYZE passages")
    query = _near(rng, 0, 1, 0.0)[0].tolist()  # right in the crowd

    hits = await services.store.knowledge.search_passages(query, k=5, section="Symptom")
    assert len(hits) == 5 and {h.section for h in hits} == {"Symptom"}
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    unfiltered = await services.store.knowledge.search_passages(query, k=5)
    assert {h.section for h in unfiltered} == {"Cause"}


async def test_a_namespace_buried_under_closer_items_still_returns_k_hits(services):
    rng = np.random.default_rng(8)
    index = PgVectorIndex(services.store.pool)
    crowd, rare = _near(rng, 0, 1000, 0.02), _near(rng, 1, 1000, 0.3)
    await index.upsert("crowd", "ToolCatalogue",
                       [VectorItem(id=f"c{i}", content="c", embedding=v.tolist()) for i, v in enumerate(crowd)])
    await index.upsert("rare", "ToolCatalogue",
                       [VectorItem(id=f"r{i}", content="r", embedding=v.tolist()) for i, v in enumerate(rare)])
    async with services.store.pool.connection() as conn:
        await conn.execute("ANALYZE vector_items")
    hits = await index.search("rare", "ToolCatalogue", _near(rng, 0, 1, 0.0)[0].tolist(), 4)
    assert len(hits) == 4 and all(h.id.startswith("r") for h in hits)
