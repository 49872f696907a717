"""Evidence queries whose cost does not grow with the store (issue 25, item 5): a context clue's and a
cause's incident counts are kept at write time (node_incidents) and a clue on many incidents is read
from a bounded sample. On a small store the ranking must get exactly the inputs it got before; the
previous queries are kept in bench/analysis_scale/previous_queries.py for this comparison."""

from __future__ import annotations


import pytest

from bamboo.analysis import queries
from bamboo.analysis.clues import extract_clues
from bamboo.analysis.service import AnalysisService
from bamboo.models.incident import Incident
from bamboo.samples import generate_incidents
from bench.analysis_scale import previous_queries as previous
from bench.analysis_scale.store_builder import graph_writes, learn
from tests.services import ROOT

KEY = b"k" * 32
RECOUNT = ("SELECT v.n, count(DISTINCT p.graph_id) FROM edge_provenance p JOIN edges e ON e.id = p.edge_id "
           "CROSS JOIN LATERAL (VALUES (e.src), (e.dst)) AS v(n) GROUP BY v.n")


def bundled() -> list[Incident]:
    return [Incident.model_validate_json(p.read_text()) for p in sorted((ROOT / "examples" / "incidents").glob("*.json"))]


async def counts(pool) -> tuple[dict[int, int], dict[int, int]]:
    """node_incidents as kept, and as counted from the provenance now."""
    async with pool.connection() as conn:
        kept = dict(await (await conn.execute("SELECT node_id, incidents FROM node_incidents WHERE incidents > 0")).fetchall())
        counted = dict(await (await conn.execute(RECOUNT)).fetchall())
    return kept, counted


def as_rows(edges) -> list[tuple]:
    return [(e.clue_kind, e.clue_name, e.cause, e.cause_description, e.frequency, round(e.confidence, 9), e.clue_total)
            for e in edges]


@pytest.fixture
async def examples_store(services):
    """The bundled incidents learned through the store's write path (no model: reviewed records)."""
    await learn(services.store.knowledge, await graph_writes(bundled(), KEY), group=10)
    return services


async def test_the_ranking_gets_the_same_inputs_as_before_on_a_small_store(examples_store):
    pool = examples_store.store.pool
    analysis = AnalysisService(examples_store)
    tasks = [i.task_data for i in bundled()] + [i.task_data for i in generate_incidents(6, seed=11, noise=0.1)]
    compared_context = 0
    for task in tasks:
        clues = extract_clues(task, KEY).clues
        new_ctx, old_ctx = await queries.context_edges(pool, clues), await previous.context_edges(pool, clues)
        assert as_rows(new_ctx) == as_rows(old_ctx)
        compared_context += len(new_ctx)
        causes = sorted({e.cause for e in await queries.clue_edges(pool, clues) + new_ctx})
        assert await queries.cause_stats(pool, causes) == await previous.cause_stats(pool, causes)
        assert await queries.resolutions(pool, causes) == await previous.resolutions(pool, causes)
        now = await analysis.gather_evidence(task)
        with previous.previous_queries():
            before = await analysis.gather_evidence(task)
        assert [c.model_dump() for c in now.candidates] == [c.model_dump() for c in before.candidates]
    assert compared_context > 0  # the context query was exercised, not only empty answers


async def test_node_incidents_stay_equal_to_a_count_of_the_provenance(examples_store):
    pool, store = examples_store.store.pool, examples_store.store.knowledge
    kept, counted = await counts(pool)
    assert kept == counted and kept
    # Re-writing graphs replaces what they name: the first two incidents' graphs now say what the last
    # two said, under their own ids; then the same write again changes nothing.
    incidents = bundled()
    later = await graph_writes(incidents[-2:], KEY)
    moved = [w.model_copy(update={"graph_id": first.graph_id()}) for w, first in zip(later, incidents[:2])]
    await learn(store, moved)
    kept, counted = await counts(pool)
    assert kept == counted
    await learn(store, moved)
    assert await counts(pool) == (kept, counted)


async def test_a_common_clue_is_read_from_a_bounded_sample_scaled_to_its_incidents(examples_store):
    pool = examples_store.store.pool
    clues = extract_clues(bundled()[0].task_data, KEY).clues
    whole = await queries.context_edges(pool, clues)
    sampled = await queries.context_edges(pool, clues, cap=4)
    async with pool.connection() as conn:
        incidents = dict(await (await conn.execute(
            "SELECT n.name, ni.incidents FROM nodes n JOIN node_incidents ni ON ni.node_id = n.id "
            "WHERE n.kind = 'Task_Feature' AND n.name = ANY(%s)", ([e.clue_name for e in whole],))).fetchall())
    common = {e.clue_name for e in whole if incidents[e.clue_name] > 4}
    assert common, "the bundled incidents share some context feature"
    for name in common:
        total = next(e.clue_total for e in sampled if e.clue_name == name)
        assert 0.5 * incidents[name] <= total <= 2 * incidents[name]
        assert {e.cause for e in sampled if e.clue_name == name} <= {e.cause for e in whole if e.clue_name == name}
    # clues on no more incidents than the cap are read whole
    assert [e for e in sampled if e.clue_name not in common] == [e for e in whole if e.clue_name not in common]
