"""The learned knowledge as an operator browses it: the known causes, and per cause its incidents, resolutions
and investigation steps, each with the incidents it came from.

One reason to change: what a person (the console's knowledge page) or another agent (the MCP server's
resources) is shown of the graph. Every read is bounded, whatever the store holds (100k incidents): a page of
causes ordered by the write-time count of incidents naming each (``node_incidents``, migration 024), and per
cause at most ``MAX_ITEMS`` incidents, resolutions and steps, each with at most ``MAX_SOURCES`` incidents of
provenance. Provenance is read per edge in graph-id order through its primary key and capped there, so a cause
on tens of thousands of incidents costs what a rare one does.

Everything read here was written from model output or incident text: callers show it as hostile text.
"""

from __future__ import annotations

from datetime import datetime

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

PAGE_SIZE = 25
MAX_PAGE = 100
MAX_ITEMS = 50
MAX_SOURCES = 20
MAX_QUERY = 200
TOP_RESOLUTIONS = 3


class CauseSummary(BaseModel):
    """A known cause as a list shows it."""

    id: int = Field(description="the cause's node id: stable, whatever the name holds")
    name: str
    description: str = ""
    incidents: int = Field(description="stored incidents that name the cause")
    resolutions: list[str] = Field(default_factory=list, description=f"its {TOP_RESOLUTIONS} most used resolutions")
    resolution_count: int = 0
    step_count: int = Field(0, description="distinct investigation steps recorded for it")


class CausePage(BaseModel):
    query: str = ""
    offset: int = 0
    limit: int = PAGE_SIZE
    total: int = Field(description="causes matching the query, of which this is one page")
    causes: list[CauseSummary]

    @property
    def has_next(self) -> bool:
        return self.offset + len(self.causes) < self.total


class IncidentRef(BaseModel):
    graph_id: str
    incident_id: str
    task_id: int | None = None
    stored_at: datetime


class Resolution(BaseModel):
    name: str
    description: str = ""
    incidents: int = Field(description="stored incidents that recorded this resolution for the cause")
    sources: list[str] = Field(default_factory=list, description=f"the first {MAX_SOURCES} of them (graph ids)")


class ProcedureStep(BaseModel):
    name: str
    description: str = ""
    order: int = Field(0, description="its place in the procedure, as the incidents shown recorded it")
    incidents: int = Field(description="stored incidents that recorded this step for the cause")
    sources: list[str] = Field(default_factory=list, description=f"the first {MAX_SOURCES} of them (graph ids)")


class CauseDetail(BaseModel):
    cause: CauseSummary
    incidents: list[IncidentRef] = Field(description=f"the first {MAX_ITEMS} incidents naming it, by graph id")
    resolutions: list[Resolution]
    steps: list[ProcedureStep]


def whole_number(text: str) -> int | None:
    """A cause id, an offset or a page number as a front end receives it, as text: ASCII digits only
    (``str.isdigit`` alone takes "²", which ``int`` refuses), else None."""
    return int(text) if text.isascii() and text.isdigit() else None


def _like(text: str) -> str:
    """``text`` as an ILIKE pattern that matches it literally anywhere (its own ``%`` and ``_`` escaped)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# The first MAX_SOURCES graph ids of an edge's provenance (its primary key is (edge_id, graph_id)).
_SOURCES = ("LEFT JOIN LATERAL (SELECT array_agg(graph_id ORDER BY graph_id) AS ids, "
            "min(nullif(params->>'order', '')::int) AS ord FROM ("
            "  SELECT graph_id, params FROM edge_provenance p WHERE p.edge_id = e.id ORDER BY graph_id LIMIT %(sources)s"
            ") s) src ON true ")

_MATCHING = ("FROM nodes c JOIN node_incidents ni ON ni.node_id = c.id AND ni.incidents > 0 "
             "WHERE c.kind = 'Cause' AND (%(q)s = '' OR c.name ILIKE %(like)s OR c.description ILIKE %(like)s) ")

_SUMMARY = ("SELECT c.id, c.name, c.description, c.incidents, coalesce(r.names, '{}'), coalesce(r.n, 0), "
            "  coalesce(st.n, 0) "
            "FROM chosen c "
            "LEFT JOIN LATERAL (SELECT (array_agg(d.name ORDER BY e.frequency DESC, d.name))[1:%(top)s] AS names, "
            "  count(*) AS n FROM edges e JOIN nodes d ON d.id = e.dst "
            "  WHERE e.src = c.id AND e.kind = 'solved_by' AND e.frequency > 0) r ON true "
            "LEFT JOIN LATERAL (SELECT count(*) AS n FROM edges e "
            "  WHERE e.src = c.id AND e.kind = 'investigated_by' AND e.frequency > 0) st ON true ")


def _summary(row: tuple) -> CauseSummary:
    return CauseSummary(id=row[0], name=row[1], description=row[2], incidents=row[3], resolutions=list(row[4]),
                        resolution_count=row[5], step_count=row[6])


class KnowledgeBrowse:
    """Bounded reads of the knowledge graph for browsing; nothing here writes."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def causes(self, query: str = "", offset: int = 0, limit: int = PAGE_SIZE) -> CausePage:
        """One page of the causes whose name or description holds ``query`` (any case), most incidents first."""
        query = query.strip()[:MAX_QUERY]
        limit, offset = max(1, min(limit, MAX_PAGE)), max(0, offset)
        params = {"q": query, "like": _like(query), "limit": limit, "offset": offset, "top": TOP_RESOLUTIONS}
        async with self._pool.connection() as conn:
            total_row = await (await conn.execute("SELECT count(*) " + _MATCHING, params)).fetchone()
            rows = await (await conn.execute(
                "WITH chosen AS MATERIALIZED (SELECT c.id, c.name, c.description, ni.incidents " + _MATCHING +
                "  ORDER BY ni.incidents DESC, c.name, c.id LIMIT %(limit)s OFFSET %(offset)s) "
                + _SUMMARY + "ORDER BY c.incidents DESC, c.name, c.id", params)).fetchall()
        return CausePage(query=query, offset=offset, limit=limit, total=total_row[0] if total_row else 0,
                         causes=[_summary(r) for r in rows])

    async def cause(self, cause_id: int) -> CauseDetail | None:
        """One cause with its first incidents, its resolutions and its steps, each with where it came from;
        None when ``cause_id`` is no cause (one past a node id's bigint range is none, not a database error)."""
        if not 0 < cause_id < 2**63:
            return None
        params = {"id": cause_id, "items": MAX_ITEMS, "sources": MAX_SOURCES, "top": TOP_RESOLUTIONS}
        async with self._pool.connection() as conn:
            found = await (await conn.execute(
                "WITH chosen AS (SELECT c.id, c.name, c.description, coalesce(ni.incidents, 0) AS incidents "
                "  FROM nodes c LEFT JOIN node_incidents ni ON ni.node_id = c.id "
                "  WHERE c.id = %(id)s AND c.kind = 'Cause') " + _SUMMARY, params)).fetchone()
            if found is None:
                return None
            # The first MAX_ITEMS graph ids overall are each among the first MAX_ITEMS of every edge that holds
            # them, so reading that many per edge (through the primary key) finds them without a full count.
            incidents = await (await conn.execute(
                "SELECT g.graph_id, g.incident_id, g.task_id, g.stored_at FROM ("
                "  SELECT DISTINCT x.graph_id FROM edges e CROSS JOIN LATERAL ("
                "    SELECT p.graph_id FROM edge_provenance p WHERE p.edge_id = e.id ORDER BY p.graph_id "
                "    LIMIT %(items)s) x "
                "  WHERE e.src = %(id)s OR e.dst = %(id)s ORDER BY x.graph_id LIMIT %(items)s) ids "
                "JOIN graphs g ON g.graph_id = ids.graph_id ORDER BY g.graph_id", params)).fetchall()
            resolutions = await (await conn.execute(
                "SELECT d.name, d.description, e.frequency, coalesce(src.ids, '{}') "
                "FROM edges e JOIN nodes d ON d.id = e.dst " + _SOURCES +
                "WHERE e.src = %(id)s AND e.kind = 'solved_by' AND e.frequency > 0 "
                "ORDER BY e.frequency DESC, d.name LIMIT %(items)s", params)).fetchall()
            steps = await (await conn.execute(
                "SELECT d.name, d.description, coalesce(src.ord, 0), e.frequency, coalesce(src.ids, '{}') "
                "FROM edges e JOIN nodes d ON d.id = e.dst " + _SOURCES +
                "WHERE e.src = %(id)s AND e.kind = 'investigated_by' AND e.frequency > 0 "
                "ORDER BY e.frequency DESC, d.name LIMIT %(items)s", params)).fetchall()
        ordered = sorted(steps, key=lambda r: (r[2], -r[3], r[0]))
        return CauseDetail(
            cause=_summary(found),
            incidents=[IncidentRef(graph_id=r[0], incident_id=r[1], task_id=r[2], stored_at=r[3]) for r in incidents],
            resolutions=[Resolution(name=r[0], description=r[1], incidents=r[2], sources=list(r[3]))
                         for r in resolutions],
            steps=[ProcedureStep(name=r[0], description=r[1], order=r[2], incidents=r[3], sources=list(r[4]))
                   for r in ordered])
