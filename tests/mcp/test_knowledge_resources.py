"""The knowledge itself, read from a real store: the bounded browsing reads (``bamboo.store.knowledge_browse``)
and `bamboo mcp serve` serving them as resources, over stdio and streamable HTTP, to the official client.

Issue 27: causes, incidents, resolutions and procedures were visible only through `bamboo kb` and SQL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from urllib.parse import quote

import pytest

from bamboo.store.knowledge_browse import MAX_ITEMS, MAX_SOURCES, KnowledgeBrowse
from tests.console.knowledge_seed import COMMON_CAUSE, COMMON_INCIDENTS, EXAMPLES, HOSTILE_CAUSE, seed
from tests.services import worker_env

from .conftest import free_port
from .test_cli import _wait_for_port


async def test_causes_are_paged_by_incidents_filtered_and_each_shown_with_its_provenance(services) -> None:
    await seed(services.store.knowledge)
    browse = KnowledgeBrowse(services.store.pool)

    page = await browse.causes(limit=3)
    assert page.total == 6 and [c.incidents for c in page.causes] == [COMMON_INCIDENTS, 2, 1] and page.has_next
    common = page.causes[0]
    assert common.name == COMMON_CAUSE and common.resolution_count == 2 and common.step_count == 2
    assert common.resolutions == ["Increase ramCount and retry", "Increase ramCount per core"]
    assert page.causes[1].name == "Site in scheduled downtime"
    rest = await browse.causes(offset=3, limit=3)
    assert len(rest.causes) == 3 and not rest.has_next
    assert {c.name for c in page.causes + rest.causes} == {e.cause for e in EXAMPLES} | {COMMON_CAUSE}

    # Any case, name or description; the filter's own % and _ are literal characters.
    assert [c.name for c in (await browse.causes("SCHEDULED")).causes] == ["Site in scheduled downtime"]
    assert [c.name for c in (await browse.causes("as reviewed")).causes][0] == COMMON_CAUSE
    assert (await browse.causes("%")).total == 0 and (await browse.causes("_")).total == 0
    assert [c.name for c in (await browse.causes("<script>")).causes] == [HOSTILE_CAUSE]

    detail = await browse.cause(common.id)
    assert detail is not None and detail.cause.incidents == COMMON_INCIDENTS
    ids = [f"panda:{40200000 + n}:broken" for n in range(COMMON_INCIDENTS)]
    assert [i.graph_id for i in detail.incidents] == sorted(ids)[:MAX_ITEMS]  # bounded, in graph id order
    assert detail.incidents[0].incident_id == "inc-40200000" and detail.incidents[0].task_id == 40200000
    most, fewer = detail.resolutions
    assert (most.name, most.incidents, fewer.incidents) == ("Increase ramCount and retry", 45, 15)
    assert len(most.sources) == MAX_SOURCES and most.sources == sorted(most.sources) and len(fewer.sources) == 15
    assert set(fewer.sources) == {f"panda:{40200000 + n}:broken" for n in range(0, COMMON_INCIDENTS, 4)}
    assert [(s.order, s.name) for s in detail.steps] == [
        (1, "Check the scout jobs' maxPSS against ramCount"),
        (2, "Compare ramCount with the last successful task of the same sample")]
    assert all(s.incidents == COMMON_INCIDENTS and len(s.sources) == MAX_SOURCES for s in detail.steps)

    hostile = await browse.cause(next(c.id for c in page.causes + rest.causes if c.name == HOSTILE_CAUSE))
    assert hostile is not None and hostile.resolutions[0].name == "[Raise ramCount](http://evil.example/) <b>now</b>"
    assert hostile.incidents[0].graph_id == "panda:40140001:failed"
    assert await browse.cause(10**9) is None and await browse.cause(2**63) is None  # beyond bigint: none, no error
    async with services.store.pool.connection() as conn:
        row = await (await conn.execute("SELECT id FROM nodes WHERE kind = 'Symptom' LIMIT 1")).fetchone()
    assert await browse.cause(row[0]) is None  # an id, but not a cause's


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_mcp_serve_offers_the_stored_knowledge_as_resources(services, settings, transport: str) -> None:
    """The default reader (the store, as populate filled it) over both transports: the listed resource, the
    templates, one page filtered by a name's own characters, and one cause read by its id."""
    from mcp import Client, MCPError, StdioServerParameters

    await seed(services.store.knowledge)
    env = worker_env(settings)
    args = ["-c", "from bamboo.cli.tools_cmd import mcp_app; mcp_app()", "serve"]
    process = None
    if transport == "stdio":
        target: object = StdioServerParameters(command=sys.executable, args=args, env=env)
    else:
        port = free_port()
        process = subprocess.Popen([sys.executable, *args, "--transport", transport, "--port", str(port)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_port(process, port)
        target = f"http://127.0.0.1:{port}/mcp"
    try:
        async with Client(target) as client:  # type: ignore[arg-type]
            assert client.server_capabilities.resources is not None and client.server_capabilities.prompts is None
            assert [str(r.uri) for r in (await client.list_resources()).resources] == ["bamboo://knowledge/causes"]
            templates = (await client.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} == {"bamboo://knowledge/causes{?q,offset}",
                                                          "bamboo://knowledge/causes/{cause_id}"}
            [listed] = (await client.read_resource("bamboo://knowledge/causes")).contents
            page = json.loads(listed.text)
            assert page["total"] == 6 and page["causes"][0]["name"] == COMMON_CAUSE and "next" not in page

            [found] = (await client.read_resource(f"bamboo://knowledge/causes?q={quote('<script>', safe='')}")).contents
            [hostile] = json.loads(found.text)["causes"]
            assert hostile["name"] == HOSTILE_CAUSE and hostile["uri"] == f"bamboo://knowledge/causes/{hostile['id']}"
            [cause] = (await client.read_resource(hostile["uri"])).contents
            detail = json.loads(cause.text)
            assert detail["cause"]["name"] == HOSTILE_CAUSE and detail["steps"][0]["name"] == "`rm -rf /` <script>x</script>"
            assert detail["resolutions"][0]["sources"] == ["panda:40140001:failed"]
            with pytest.raises(MCPError, match="no cause"):
                await client.read_resource("bamboo://knowledge/causes/999999999")
            # The tools are still there, answering from the same store.
            answer = await client.call_tool("procedures_for_cause", {"cause": COMMON_CAUSE, "limit": 1})
            assert answer.structured_content["procedures"][0]["times_used"] == COMMON_INCIDENTS
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=15) == 0
