"""A resolution record's investigation steps become Procedure nodes: a runbook pasted as a thousand steps made a
thousand nodes, each matched against the store and all of them sent to the model."""

from __future__ import annotations

import json

from bamboo.extraction.llm_schemas import CanonicalLabels
from bamboo.extraction.panda.strategy import MAX_RECORD_PROCEDURES, PandaExtractionStrategy
from bamboo.models.incident import Incident, ResolutionRecord


class EchoLabels:
    """The model's canonical labels: the record's own words; remembers what it was sent."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def structured(self, *, system: str, user: str, output: type, name: str):
        ask = json.loads(user)
        self.sent.append(ask)
        return CanonicalLabels(cause=ask["cause"], resolution=ask["resolution"], procedures=[])


async def test_a_record_contributes_a_bounded_number_of_steps_and_says_so() -> None:
    steps = [f"check item {i} of the runbook" for i in range(1000)]
    incident = Incident(incident_id="runbook", task_data={"jediTaskID": 1, "status": "failed"},
                        resolution_record=ResolutionRecord(cause="Insufficient memory", resolution="Raise the memory",
                                                           procedure=steps))
    llm = EchoLabels()
    result = await PandaExtractionStrategy(llm, b"k" * 32).extract(incident)
    procedures = [n for n in result.graph.nodes if n.kind == "Procedure"]
    assert len(procedures) == MAX_RECORD_PROCEDURES == len(llm.sent[0]["procedures"])
    assert [n.description for n in procedures] == steps[:MAX_RECORD_PROCEDURES]
    assert any(f"first {MAX_RECORD_PROCEDURES} of the record's 1000" in note for note in result.notes), result.notes
