"""A learned store without a model: incidents with reviewed resolution records go through the product's
extraction (`PandaExtractionStrategy`) with a stand-in for the model that proposes each record's own
wording (what the strategy keeps anyway), and the graphs are written in groups through the store's own
write path (`KnowledgeStore.write_graphs`), so the counts kept at write time are kept as in production.

Passages are left out: they feed the similar-incident search (vector retrieval, measured on its own),
not the evidence queries, and inserting each through the HNSW index would dominate the load time.
"""

from __future__ import annotations

import json
from typing import Any

from bamboo.extraction.llm_schemas import CanonicalLabels
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.models.graph import GraphWrite
from bamboo.models.incident import Incident
from bamboo.store.knowledge import GraphVectors, KnowledgeStore


class RecordWording:
    """Answers the strategy's one model call on a reviewed record with the record's own labels."""

    async def structured(self, *, system: str, user: str, output: Any, name: str, **_: Any) -> CanonicalLabels:
        ask = json.loads(user)
        return CanonicalLabels(cause=ask["cause"][:120], resolution=ask["resolution"][:120],
                               procedures=[p[:120] for p in ask["procedures"][:8]])


async def graph_writes(incidents: list[Incident], pseudonym_key: bytes) -> list[GraphWrite]:
    """One graph per incident, as accumulation extracts it from a reviewed record (no passages)."""
    strategy = PandaExtractionStrategy(RecordWording(), pseudonym_key)  # type: ignore[arg-type]
    out = []
    for incident in incidents:
        result = await strategy.extract(incident)
        out.append(GraphWrite(graph_id=incident.graph_id(), incident_id=incident.incident_id,
                              task_id=incident.task_data.get("jediTaskID"), graph=result.graph,
                              summary=result.summary))
    return out


async def learn(store: KnowledgeStore, writes: list[GraphWrite], group: int = 500) -> None:
    """Write the graphs in groups, as a populate batch commits them."""
    for at in range(0, len(writes), group):
        await store.write_graphs([GraphVectors(w, []) for w in writes[at:at + group]])
