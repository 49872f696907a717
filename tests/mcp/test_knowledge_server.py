"""Bamboo's knowledge MCP server, in-process against an in-memory reader."""

from __future__ import annotations

import pytest
from mcp import Client

from bamboo.mcp.external import convert_result
from bamboo.mcp.knowledge_server import CauseMatch, IncidentMatch, ProcedureMatch, build_knowledge_server


class InMemoryReader:
    def __init__(self) -> None:
        self.causes = {"maxpss": [CauseMatch(cause="Insufficient memory request", score=0.9, incident_count=3)]}
        self.procedures = {"insufficient memory request": [
            ProcedureMatch(cause="Insufficient memory request", steps=["check scout maxPSS"],
                           tools=["get_scout_job_details"], times_used=4)]}

    async def causes_for_symptom(self, symptom: str, limit: int) -> list[CauseMatch]:
        return [m for key, ms in self.causes.items() if key in symptom.lower() for m in ms][:limit]

    async def similar_incidents(self, description: str, limit: int) -> list[IncidentMatch]:
        return []

    async def procedures_for_cause(self, cause: str, limit: int) -> list[ProcedureMatch]:
        return self.procedures.get(cause.lower(), [])[:limit]


class DownReader(InMemoryReader):
    async def similar_incidents(self, description: str, limit: int) -> list[IncidentMatch]:
        raise ConnectionError("database is down")


async def test_tools_are_read_only_and_answer() -> None:
    async with Client(build_knowledge_server(InMemoryReader())) as client:
        listed = (await client.list_tools()).tools
        assert {t.name for t in listed} == {"causes_for_symptom", "similar_incidents", "procedures_for_cause"}
        assert all(t.annotations.read_only_hint and not t.annotations.destructive_hint for t in listed)
        causes = convert_result(await client.call_tool("causes_for_symptom", {"symptom": "MaxPSS too high"}))
        assert causes.data["causes"][0]["cause"] == "Insufficient memory request"
        procedures = convert_result(await client.call_tool("procedures_for_cause",
                                                           {"cause": "Insufficient memory request", "limit": 1}))
        assert procedures.data["procedures"][0]["tools"] == ["get_scout_job_details"]


async def test_nothing_known_differs_from_store_down_and_bad_input() -> None:
    async with Client(build_knowledge_server(DownReader())) as client:
        nothing = convert_result(await client.call_tool("causes_for_symptom", {"symptom": "cvmfs"}))
        assert nothing.ok and nothing.data["causes"] == []
        down = convert_result(await client.call_tool("similar_incidents", {"description": "x"}))
        assert not down.ok and "knowledge store unavailable" in down.error and "database is down" in down.error
        bad = convert_result(await client.call_tool("causes_for_symptom", {"symptom": "x", "limit": 500}))
        assert not bad.ok and "limit" in bad.error
        empty = convert_result(await client.call_tool("procedures_for_cause", {"cause": "  "}))
        assert not empty.ok and "must not be empty" in empty.error


async def test_the_server_says_what_it_is_and_offers_only_tools() -> None:
    """Issue 27: an empty server version, resources and prompts advertised though the lists were always empty,
    and the limit's bounds known only by calling."""
    from importlib.metadata import version

    from mcp import MCPError

    async with Client(build_knowledge_server(InMemoryReader())) as client:
        assert client.server_info.name == "bamboo-knowledge"
        assert client.server_info.version == version("bamboo-temporal") != ""
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.resources is None and capabilities.prompts is None
        with pytest.raises(MCPError, match="Method not found"):
            await client.list_prompts()
        for tool in (await client.list_tools()).tools:
            properties = tool.input_schema["properties"]
            assert (properties["limit"]["minimum"], properties["limit"]["maximum"]) == (1, 50), tool.name
            [text] = [p for name, p in properties.items() if name != "limit"]
            assert text["type"] == "string" and text["minLength"] == 1, tool.name
        zero = convert_result(await client.call_tool("similar_incidents", {"description": "x", "limit": 0}))
        assert not zero.ok and "limit must be between 1 and 50, got 0" in zero.error
        assert "\n" not in zero.error  # one line saying what to send, not a validation report


async def test_incident_file_reader_over_the_examples() -> None:
    from pathlib import Path

    from bamboo.mcp.incident_reader import IncidentFileKnowledgeReader

    examples = Path(__file__).resolve().parents[2] / "examples" / "incidents"
    reader = IncidentFileKnowledgeReader.from_dir(examples)
    if not reader.incidents:
        pytest.skip("no reviewed example incidents in this checkout")
    causes = await reader.causes_for_symptom("Payload ran out of memory: maxPSS exceeds ramCount", 3)
    assert "memory" in causes[0].cause.lower()
    procedures = await reader.procedures_for_cause(causes[0].cause, 3)
    assert procedures and procedures[0].steps
    similar = await reader.similar_incidents("stage-out failed: quota exceeded on SCRATCHDISK", 2)
    assert similar and "quota" in (similar[0].cause or "").lower() + similar[0].summary.lower()
