"""Read-only SQL the analysis needs. Nothing here writes: analysis must leave the knowledge store as it
found it (a test compares every table's row count before and after).

Each clue type is looked up through the one edge kind accumulation writes for it (EDGE_SHAPES), so the
edge written and the edge queried are the same (an earlier version wrote Environment clues with one edge
kind and queried them with another, so they never matched).

Their cost must not grow with how much was learned (issue 25): counts per node are read from
node_incidents, which the graph write keeps, and provenance is read only in bounded amounts.

An edge counts only while a stored incident supports it (frequency > 0). A graph write commits its nodes and
edges before the graph itself (bamboo.store.knowledge), so a worker that dies between the two, a cancelled
batch or a graph refused in the second step leaves edges of frequency 0 that no incident ever stored; read
as knowledge they made a never-stored cause a candidate and a new symptom look already explained.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from bamboo.analysis.contract import Clue
from bamboo.store.knowledge import STORED_NODE

# clue node kind -> the edge kind that links it to a Cause (see bamboo.models.graph.EDGE_SHAPES)
CAUSE_EDGE_FOR_KIND = {
    "Symptom": "indicate",
    "Task_Feature": "contribute_to",
    "Component": "originated_from",
    "Environment": "associated_with",
}


@dataclass(frozen=True)
class ClueEdge:
    clue_kind: str
    clue_name: str
    cause: str
    cause_description: str
    frequency: int
    confidence: float
    clue_total: int


@dataclass(frozen=True)
class CauseStats:
    incidents: int
    confirmations: int
    proposed: int
    proposed_correct: int


@dataclass(frozen=True)
class ProcedureRow:
    name: str
    description: str
    order: int
    code: str | None


async def clue_edges(pool: AsyncConnectionPool, clues: list[Clue]) -> list[ClueEdge]:
    """Every (clue → Cause) edge a stored incident supports for the given clues, with the clue's total
    evidence across causes (an unsupported edge is a half-written graph's, see the module's note)."""
    wanted = [(c.kind, c.name, CAUSE_EDGE_FOR_KIND[c.kind]) for c in clues
              if c.kind in CAUSE_EDGE_FOR_KIND and c.type != "task_context"]
    if not wanted:
        return []
    kinds, names, edge_kinds = (list(x) for x in zip(*wanted))
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "WITH clue(kind, name, edge_kind) AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])) "
            "SELECT s.kind, s.name, c.name, c.description, e.frequency, e.confidence, "
            "       sum(e.frequency) OVER (PARTITION BY s.id) "
            "FROM clue JOIN nodes s ON s.kind = clue.kind AND s.name = clue.name "
            "JOIN edges e ON e.src = s.id AND e.kind = clue.edge_kind AND e.frequency > 0 "
            "JOIN nodes c ON c.id = e.dst AND c.kind = 'Cause' "
            "ORDER BY s.kind, s.name, c.name",
            (kinds, names, edge_kinds),
        )).fetchall()
    return [ClueEdge(r[0], r[1], r[2], r[3], int(r[4]), float(r[5]), int(r[6])) for r in rows]


# Stored incidents read per context clue. A clue on more incidents than this is read from a sample of
# them (the first by graph id, spread over its symptoms by their counts) and its counts scaled up to its
# incident count: such a clue is on a large share of the store and says little about any one cause, and
# reading all of it made analysis cost grow with the store (vo=atlas is on nearly every incident). A
# store with fewer incidents per clue than this is read whole: the ranking gets exactly what it did.
# What it costs above the cap: the clue's counts are estimates, and a cause behind fewer than about one
# in `cap` of the clue's incidents (per symptom) may be missing from the sample, and then gets no
# evidence from that clue (the task's other clues still count for it).
MAX_INCIDENTS_PER_CONTEXT_CLUE = 256


async def context_edges(pool: AsyncConnectionPool, clues: list[Clue],
                        cap: int = MAX_INCIDENTS_PER_CONTEXT_CLUE) -> list[ClueEdge]:
    """Context features → Cause through provenance: the feature was associated with the symptom that
    indicated the cause in the same stored incident (accumulation links context to the symptom only).

    How many incidents name the feature comes from node_incidents, kept at write time; at most about
    `cap` of them are read per feature (each of its symptom links gets its share of `cap`, by count)."""
    names = [c.name for c in clues if c.type == "task_context"]
    if not names:
        return []
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "WITH f AS ("
            "  SELECT n.id, n.name, coalesce(ni.incidents, 0) AS incidents FROM nodes n "
            "  LEFT JOIN node_incidents ni ON ni.node_id = n.id WHERE n.kind = 'Task_Feature' AND n.name = ANY(%(names)s)), "
            "ea AS ("
            "  SELECT f.name, f.incidents, e.id, e.dst, e.frequency, sum(e.frequency) OVER (PARTITION BY f.id) AS links "
            "  FROM f JOIN edges e ON e.src = f.id AND e.kind = 'associated_with'), "
            "pa AS MATERIALIZED ("
            "  SELECT ea.name, ea.incidents, ea.dst, p.graph_id, count(*) OVER (PARTITION BY ea.name) AS read "
            "  FROM ea CROSS JOIN LATERAL ("
            "    SELECT graph_id FROM edge_provenance WHERE edge_id = ea.id ORDER BY graph_id "
            "    LIMIT CASE WHEN ea.incidents <= %(cap)s THEN NULL "
            "               ELSE ceil(%(cap)s::float8 * ea.frequency / ea.links)::bigint END) p) "
            "SELECT pa.name, c.name, c.description, count(DISTINCT pa.graph_id), avg(ec.confidence), "
            "       max(pa.incidents), max(pa.read) "
            "FROM pa JOIN edges ec ON ec.src = pa.dst AND ec.kind = 'indicate' "
            "JOIN edge_provenance pc ON pc.edge_id = ec.id AND pc.graph_id = pa.graph_id "
            "JOIN nodes c ON c.id = ec.dst AND c.kind = 'Cause' "
            "GROUP BY pa.name, c.name, c.description ORDER BY pa.name, c.name",
            {"names": names, "cap": cap},
        )).fetchall()
    counted = [(r[0], r[1], r[2], _scaled(int(r[3]), int(r[5]), int(r[6]), cap), float(r[4])) for r in rows]
    totals: dict[str, int] = {}
    for name, _, _, n, _ in counted:
        totals[name] = totals.get(name, 0) + n
    return [ClueEdge("Task_Feature", name, cause, description, n, confidence, totals[name])
            for name, cause, description, n, confidence in counted]


def _scaled(found: int, incidents: int, read: int, cap: int) -> int:
    """A count from a sampled clue, scaled to all its incidents; a clue read whole is counted as read.
    `read` counts the (symptom link, incident) rows read: accumulation links a context feature to one
    symptom per incident, so it is the incidents read."""
    if incidents <= cap or read <= 0 or read >= incidents:
        return found
    return max(1, round(found * incidents / read))


@dataclass(frozen=True)
class ClueCommonness:
    """How common each of a task's clues is in the store: the stored incidents (graphs) and, per clue
    ("Kind/name", clue_key), how many of them name its node. A clue on most incidents tells no cause apart."""

    incidents: int
    per_clue: dict[str, int]


# Counted exactly up to this many stored incidents; above, the planner's row estimate stands in (a
# clue's weight depends on the log of the total, so an estimate a few percent off moves it very little,
# and counting every graph would make analysis cost grow with the store, issue 25).
EXACT_INCIDENT_COUNT = 10_000


async def clue_commonness(pool: AsyncConnectionPool, clues: list[Clue]) -> ClueCommonness:
    """Read from node_incidents, which the graph write keeps: one row per clue, no provenance read."""
    keys = sorted({(c.kind, c.name) for c in clues})
    async with pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM graphs LIMIT %s) g", (EXACT_INCIDENT_COUNT,))).fetchone()
        counted = int(row[0]) if row else 0
        if counted >= EXACT_INCIDENT_COUNT:
            row = await (await conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'graphs'::regclass")).fetchone()
            counted = max(counted, int(row[0] or 0) if row else 0)
        rows = [] if not keys else await (await conn.execute(
            "SELECT n.kind, n.name, ni.incidents FROM unnest(%s::text[], %s::text[]) AS k(kind, name) "
            "JOIN nodes n ON n.kind = k.kind AND n.name = k.name "
            "JOIN node_incidents ni ON ni.node_id = n.id",
            ([k for k, _ in keys], [n for _, n in keys]))).fetchall()
    return ClueCommonness(int(counted), {clue_key(r[0], r[1]): int(r[2]) for r in rows})


def clue_key(kind: str, name: str) -> str:
    """How a verdict stores one of its task's clues: "Kind/name" (node kinds have no '/')."""
    return f"{kind}/{name}"


@dataclass(frozen=True)
class VerdictEvidence:
    """Operator verdicts on tasks that shared a clue with this one: (clue key, the cause the operator named,
    the cause the analysis had proposed or None, how many verdicts)."""

    rows: list[tuple[str, str, str | None, int]]


async def verdict_evidence(pool: AsyncConnectionPool, clues: list[Clue]) -> VerdictEvidence:
    keys = sorted({clue_key(c.kind, c.name) for c in clues})
    if not keys:
        return VerdictEvidence([])
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT k.key, f.cause, f.proposed_cause, count(*) "
            "FROM analysis_feedback f CROSS JOIN LATERAL unnest(f.clues) AS k(key) "
            "WHERE f.clues && %s::text[] AND k.key = ANY(%s::text[]) "
            "GROUP BY k.key, f.cause, f.proposed_cause ORDER BY k.key, f.cause, f.proposed_cause",
            (keys, keys),
        )).fetchall()
    return VerdictEvidence([(r[0], r[1], r[2], int(r[3])) for r in rows])


async def known_symptoms(pool: AsyncConnectionPool, names: list[str]) -> dict[str, int]:
    """Symptom name -> how many causes stored incidents link it to (0 when stored without a cause); absent when
    unknown. A symptom is known while a stored graph holds its node (`STORED_NODE`); a node whose only edges no
    incident supports is a half-written graph's (see the module's note) and stays unknown, so its task is a
    novel lead."""
    if not names:
        return {}
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT s.name, count(e.id) FROM nodes s "
            "LEFT JOIN edges e ON e.src = s.id AND e.kind = 'indicate' AND e.frequency > 0 "
            "WHERE s.kind = 'Symptom' AND s.name = ANY(%s) AND " + STORED_NODE.format(node="s.id") + " "
            "GROUP BY s.name",
            (names,),
        )).fetchall()
    return {r[0]: int(r[1]) for r in rows}


async def cause_stats(pool: AsyncConnectionPool, causes: list[str]) -> dict[str, CauseStats]:
    """Per cause: incidents that stored it (distinct graphs naming it) and what operators said about it."""
    if not causes:
        return {}
    async with pool.connection() as conn:
        # Kept at write time (node_incidents): counting a cause's provenance grew with its incidents.
        incidents: dict[str, int] = dict(await (await conn.execute(
            "SELECT c.name, ni.incidents FROM nodes c JOIN node_incidents ni ON ni.node_id = c.id "
            "WHERE c.kind = 'Cause' AND c.name = ANY(%s) AND ni.incidents > 0",
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


async def stored_dialogs(pool: AsyncConnectionPool, symptoms: list[str], causes: list[str],
                         per_cause: int) -> dict[str, list[str]]:
    """Per cause, the error dialogs (Symptom passages) of up to `per_cause` stored incidents per symptom class,
    of the incidents that linked one of these classes to it: first by graph id, read in the provenance index's
    order, so the cost does not grow with how often the cause was stored (bamboo.analysis.wording)."""
    if not symptoms or not causes:
        return {}
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT c.name, x.content FROM nodes s "
            "JOIN edges e ON e.src = s.id AND e.kind = 'indicate' AND e.frequency > 0 "
            "JOIN nodes c ON c.id = e.dst AND c.kind = 'Cause' AND c.name = ANY(%s) "
            "CROSS JOIN LATERAL (SELECT ps.content FROM edge_provenance p "
            "  JOIN passages ps ON ps.graph_id = p.graph_id AND ps.section = 'Symptom' AND ps.node_id = s.id "
            "  WHERE p.edge_id = e.id ORDER BY p.graph_id LIMIT %s) x "
            "WHERE s.kind = 'Symptom' AND s.name = ANY(%s)",
            (causes, per_cause, symptoms),
        )).fetchall()
    out: dict[str, list[str]] = {}
    for cause, content in rows:
        out.setdefault(cause, []).append(content)
    return out


@dataclass(frozen=True)
class StoredResolutions:
    """Per cause, its stored resolutions (most used first) and the incidents that recorded each."""

    texts: dict[str, list[str]]
    incidents: dict[str, dict[str, list[str]]]


MAX_INCIDENTS_PER_RESOLUTION = 20


async def resolutions(pool: AsyncConnectionPool, causes: list[str]) -> StoredResolutions:
    if not causes:
        return StoredResolutions({}, {})
    async with pool.connection() as conn:
        # Only the first MAX_INCIDENTS_PER_RESOLUTION incidents of each are shown, so only those are read.
        rows = await (await conn.execute(
            "SELECT c.name, r.name, coalesce(g.ids, '{}') "
            "FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'solved_by' AND e.frequency > 0 "
            "JOIN nodes r ON r.id = e.dst AND r.kind = 'Resolution' "
            "LEFT JOIN LATERAL (SELECT array_agg(graph_id ORDER BY graph_id) AS ids FROM ("
            "  SELECT graph_id FROM edge_provenance p WHERE p.edge_id = e.id ORDER BY graph_id LIMIT %s) x) g ON true "
            "WHERE c.kind = 'Cause' AND c.name = ANY(%s) "
            "ORDER BY c.name, e.frequency DESC, e.confidence DESC, r.name",
            (MAX_INCIDENTS_PER_RESOLUTION, causes),
        )).fetchall()
    texts: dict[str, list[str]] = {}
    incidents: dict[str, dict[str, list[str]]] = {}
    for cause, resolution, graph_ids in rows:
        texts.setdefault(cause, []).append(resolution)
        incidents.setdefault(cause, {})[resolution] = list(graph_ids)
    return StoredResolutions(texts, incidents)


async def procedures_for_cause(pool: AsyncConnectionPool, cause: str) -> list[ProcedureRow]:
    """Investigation procedures of a cause, in recorded order, with captured code when there is some."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT pn.name, pn.description, "
            "  coalesce(min((p.params->>'order')::int), 0) AS ord, pr.code "
            "FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'investigated_by' AND e.frequency > 0 "
            "JOIN nodes pn ON pn.id = e.dst AND pn.kind = 'Procedure' "
            "LEFT JOIN edge_provenance p ON p.edge_id = e.id "
            "LEFT JOIN procedures pr ON pr.signature = pn.name AND pr.status = 'approved' "
            "WHERE c.kind = 'Cause' AND lower(c.name) = lower(%s) "
            "GROUP BY pn.name, pn.description, pr.code, e.frequency ORDER BY ord, e.frequency DESC, pn.name",
            (cause,),
        )).fetchall()
    return [ProcedureRow(r[0], r[1], int(r[2]), r[3]) for r in rows]


async def graph_summaries(pool: AsyncConnectionPool, graph_ids: list[str]) -> dict[str, str]:
    if not graph_ids:
        return {}
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT graph_id, summary FROM graphs WHERE graph_id = ANY(%s)", (graph_ids,),
        )).fetchall()
    return {r[0]: r[1] for r in rows}


async def operator_cause(pool: AsyncConnectionPool, task_id: int | None) -> str | None:
    """The cause an operator confirmed or gave as the correction for this very task, if any."""
    if task_id is None:
        return None
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT cause FROM analysis_feedback WHERE task_id = %s", (task_id,))).fetchone()
    return row[0] if row else None


async def cause_names(pool: AsyncConnectionPool) -> list[str]:
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT name FROM nodes WHERE kind = 'Cause' ORDER BY name")).fetchall()
    return [r[0] for r in rows]


async def find_cause_name(pool: AsyncConnectionPool, text: str) -> str | None:
    """The stored Cause whose name equals `text` ignoring case and surrounding space, if any."""
    async with pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT name FROM nodes WHERE kind = 'Cause' AND lower(name) = lower(%s) ORDER BY name LIMIT 1",
            (text.strip(),),
        )).fetchone()
    return row[0] if row else None
