"""The evidence queries as they were before issue 25 (commit 4ff1016), kept here only as a recorded
comparison: the benchmark runs them beside today's on the same store, and tests/analysis checks that
today's give the ranking the same inputs on a small store. Nothing in the product imports this.

They count a clue's and a cause's provenance at read time: a context feature on nearly every incident
joined every provenance row of every incident, so their cost grew with the store.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from psycopg_pool import AsyncConnectionPool

from bamboo.analysis import queries
from bamboo.analysis.contract import Clue
from bamboo.analysis.queries import MAX_INCIDENTS_PER_RESOLUTION, CauseStats, ClueEdge, StoredResolutions


async def context_edges(pool: AsyncConnectionPool, clues: list[Clue]) -> list[ClueEdge]:
    names = [c.name for c in clues if c.type == "task_context"]
    if not names:
        return []
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT f.name, c.name, c.description, count(DISTINCT pc.graph_id) AS n, avg(ec.confidence) "
            "FROM nodes f JOIN edges ea ON ea.src = f.id AND ea.kind = 'associated_with' "
            "JOIN edge_provenance pa ON pa.edge_id = ea.id "
            "JOIN edge_provenance pc ON pc.graph_id = pa.graph_id "
            "JOIN edges ec ON ec.id = pc.edge_id AND ec.kind = 'indicate' AND ec.src = ea.dst "
            "JOIN nodes c ON c.id = ec.dst AND c.kind = 'Cause' "
            "WHERE f.kind = 'Task_Feature' AND f.name = ANY(%s) "
            "GROUP BY f.name, c.name, c.description ORDER BY f.name, c.name",
            (names,),
        )).fetchall()
    totals: dict[str, int] = {}
    for r in rows:
        totals[r[0]] = totals.get(r[0], 0) + int(r[3])
    return [ClueEdge("Task_Feature", r[0], r[1], r[2], int(r[3]), float(r[4]), totals[r[0]]) for r in rows]


async def cause_stats(pool: AsyncConnectionPool, causes: list[str]) -> dict[str, CauseStats]:
    if not causes:
        return {}
    async with pool.connection() as conn:
        incidents: dict[str, int] = dict(await (await conn.execute(
            "SELECT c.name, count(DISTINCT p.graph_id) FROM nodes c "
            "JOIN edges e ON (e.dst = c.id OR e.src = c.id) JOIN edge_provenance p ON p.edge_id = e.id "
            "WHERE c.kind = 'Cause' AND c.name = ANY(%s) GROUP BY c.name",
            (causes,),
        )).fetchall())
        lowered = [c.lower() for c in causes]
        fb = await (await conn.execute(
            "SELECT k, "
            "  count(*) FILTER (WHERE lower(cause) = k), "
            "  count(*) FILTER (WHERE lower(proposed_cause) = k), "
            "  count(*) FILTER (WHERE lower(proposed_cause) = k AND verdict = 'correct') "
            "FROM unnest(%s::text[]) AS k LEFT JOIN analysis_feedback f "
            "  ON lower(f.cause) = k OR lower(f.proposed_cause) = k GROUP BY k",
            (lowered,),
        )).fetchall()
    by_lower = {r[0]: r[1:] for r in fb}
    out = {}
    for c in causes:
        conf, proposed, correct = by_lower.get(c.lower(), (0, 0, 0))
        out[c] = CauseStats(int(incidents.get(c, 0)), int(conf), int(proposed), int(correct))
    return out


async def resolutions(pool: AsyncConnectionPool, causes: list[str]) -> StoredResolutions:
    if not causes:
        return StoredResolutions({}, {})
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT c.name, r.name, "
            "  coalesce(array_agg(p.graph_id ORDER BY p.graph_id) FILTER (WHERE p.graph_id IS NOT NULL), '{}') "
            "FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'solved_by' "
            "JOIN nodes r ON r.id = e.dst AND r.kind = 'Resolution' "
            "LEFT JOIN edge_provenance p ON p.edge_id = e.id "
            "WHERE c.kind = 'Cause' AND c.name = ANY(%s) "
            "GROUP BY c.name, r.name, e.frequency, e.confidence "
            "ORDER BY c.name, e.frequency DESC, e.confidence DESC, r.name",
            (causes,),
        )).fetchall()
    texts: dict[str, list[str]] = {}
    incidents: dict[str, dict[str, list[str]]] = {}
    for cause, resolution, graph_ids in rows:
        texts.setdefault(cause, []).append(resolution)
        incidents.setdefault(cause, {})[resolution] = list(graph_ids)[:MAX_INCIDENTS_PER_RESOLUTION]
    return StoredResolutions(texts, incidents)


PREVIOUS = {"context_edges": context_edges, "cause_stats": cause_stats, "resolutions": resolutions}


@contextlib.contextmanager
def previous_queries() -> Iterator[None]:
    """The analysis service reads through `bamboo.analysis.queries`; inside this block it reads with the
    queries above instead."""
    saved = {name: getattr(queries, name) for name in PREVIOUS}
    for name, fn in PREVIOUS.items():
        setattr(queries, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(queries, name, fn)
