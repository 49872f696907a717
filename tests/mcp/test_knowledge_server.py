"""Bamboo's knowledge MCP server, in-process against an in-memory reader."""

from __future__ import annotations

import pytest
from mcp import Client

import json
from datetime import UTC, datetime

from bamboo.mcp.external import convert_result
from bamboo.mcp.knowledge_server import CauseMatch, IncidentMatch, ProcedureMatch, build_knowledge_server
from bamboo.store.knowledge_browse import (
    CauseDetail, CausePage, CauseSummary, IncidentRef, ProcedureStep, Resolution,
)


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


# A cause named as model output may be: markup, a link, a path, characters a URI cannot hold.
HOSTILE = "<script>alert(1)</script> [click](http://evil.example/) ../../etc/passwd ?x=1#y"


class BrowsingReader(InMemoryReader):
    """The in-memory reader that can also browse, as the store's reader does."""

    def __init__(self, causes: int = 3) -> None:
        super().__init__()
        self.listed: list[tuple[str, int, int]] = []
        self.summaries = [CauseSummary(id=7, name=HOSTILE, incidents=40, resolutions=["Raise ramCount"],
                                       resolution_count=1, step_count=1)]
        self.summaries += [CauseSummary(id=100 + i, name=f"cause {i}", incidents=1) for i in range(causes - 1)]

    async def list_causes(self, query: str, offset: int, limit: int) -> CausePage:
        self.listed.append((query, offset, limit))
        found = [c for c in self.summaries if query.lower() in c.name.lower()]
        return CausePage(query=query, offset=offset, limit=limit, total=len(found), causes=found[offset:offset + limit])

    async def cause_detail(self, cause_id: int) -> CauseDetail | None:
        if cause_id != 7:
            return None
        return CauseDetail(
            cause=self.summaries[0],
            incidents=[IncidentRef(graph_id="panda:1:failed", incident_id="mem-1", task_id=1,
                                   stored_at=datetime(2026, 12, 1, tzinfo=UTC))],
            resolutions=[Resolution(name="Raise ramCount", incidents=40, sources=["panda:1:failed"])],
            steps=[ProcedureStep(name="check scout maxPSS", order=1, incidents=40, sources=["panda:1:failed"])])


class DownBrowser(BrowsingReader):
    async def cause_detail(self, cause_id: int) -> CauseDetail | None:
        raise ConnectionError("database is down")


async def test_a_browsing_reader_serves_the_knowledge_as_resources_and_still_no_prompts() -> None:
    """Issue 27: the knowledge was reachable only through tools (and `bamboo kb`, SQL). A reader that browses
    serves the causes as a listed resource and each cause through a template addressed by id."""
    from mcp import MCPError

    reader = BrowsingReader(causes=30)
    async with Client(build_knowledge_server(reader)) as client:
        capabilities = client.server_capabilities
        assert capabilities.resources is not None and capabilities.prompts is None
        with pytest.raises(MCPError, match="Method not found"):
            await client.list_prompts()
        [listed] = (await client.list_resources()).resources
        assert (str(listed.uri), listed.mime_type) == ("bamboo://knowledge/causes", "application/json")
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"bamboo://knowledge/causes{?q,offset}", "bamboo://knowledge/causes/{cause_id}"}

        [content] = (await client.read_resource("bamboo://knowledge/causes")).contents
        page = json.loads(content.text)
        assert page["total"] == 30 and len(page["causes"]) == 25 and page["causes"][0]["name"] == HOSTILE
        assert page["causes"][0]["uri"] == "bamboo://knowledge/causes/7"
        assert page["next"] == "bamboo://knowledge/causes?q=&offset=25"
        [rest] = (await client.read_resource(page["next"])).contents
        assert [c["name"] for c in json.loads(rest.text)["causes"]] == [f"cause {i}" for i in range(24, 29)]
        assert "next" not in json.loads(rest.text)

        # A filter is text, not a path: a cause's name may hold "..", "/", "?" and "#".
        [found] = (await client.read_resource("bamboo://knowledge/causes?q=..%2F..%2Fetc%2Fpasswd%20%3Fx")).contents
        assert [c["id"] for c in json.loads(found.text)["causes"]] == [7]
        assert reader.listed[-1] == ("../../etc/passwd ?x", 0, 25)

        [cause] = (await client.read_resource(page["causes"][0]["uri"])).contents
        detail = json.loads(cause.text)
        assert detail["cause"]["name"] == HOSTILE and detail["incidents"][0]["graph_id"] == "panda:1:failed"
        assert detail["resolutions"][0]["sources"] == ["panda:1:failed"]
        assert detail["steps"][0]["name"] == "check scout maxPSS"

        for unknown in ("bamboo://knowledge/causes/8", "bamboo://knowledge/causes/not-an-id",
                        "bamboo://knowledge/causes/%C2%B2"):  # "²" is a digit to str.isdigit, not to int
            with pytest.raises(MCPError, match="no cause"):
                await client.read_resource(unknown)
        for offset in ("-1", "%C2%B2"):
            with pytest.raises(MCPError, match="offset must be a whole number"):
                await client.read_resource(f"bamboo://knowledge/causes?offset={offset}")


async def test_a_store_failure_on_a_resource_is_an_error_not_nothing() -> None:
    from mcp import MCPError

    async with Client(build_knowledge_server(DownBrowser())) as client:
        with pytest.raises(MCPError, match="knowledge store unavailable.*database is down"):
            await client.read_resource("bamboo://knowledge/causes/7")
