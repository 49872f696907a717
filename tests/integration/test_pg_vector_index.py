"""The pgvector VectorIndex behaves like the in-memory one the selection tests use."""

import pytest

from bamboo.store.vectors import PgVectorIndex
from bamboo.tools.vector_index import MemoryVectorIndex, VectorItem


def _v(*xs: float) -> list[float]:
    return list(xs) + [0.0] * (384 - len(xs))


async def test_pg_index_matches_memory_index_and_namespaces_isolate(services):
    pg, mem = PgVectorIndex(services.store.pool), MemoryVectorIndex()
    items = [VectorItem(id="get_task", content="task details", embedding=_v(1, 0), meta={"w": 1}),
             VectorItem(id="jobs", content="jobs summary", embedding=_v(0.6, 0.8)),
             VectorItem(id="logs", content="job logs", embedding=_v(0, 1))]
    for index in (pg, mem):
        await index.upsert("ns1", "ToolCatalogue", items)
        await index.upsert("ns2", "ToolCatalogue", [VectorItem(id="other", content="x", embedding=_v(1, 0))])
        await index.upsert("ns1", "ToolCatalogue", [items[0].model_copy(update={"content": "task details v2"})])
    query = _v(0.9, 0.1)
    got, want = await pg.search("ns1", "ToolCatalogue", query, 2), await mem.search("ns1", "ToolCatalogue", query, 2)
    assert [h.id for h in got] == [h.id for h in want] == ["get_task", "jobs"]
    assert got[0].content == "task details v2" and got[0].meta == {"w": 1}
    assert got[0].score == pytest.approx(want[0].score, abs=1e-5)
    assert [h.id for h in await pg.search("ns2", "ToolCatalogue", query, 5)] == ["other"]
