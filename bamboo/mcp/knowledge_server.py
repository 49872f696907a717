"""Bamboo as an MCP server: what it has learned, offered read-only to other agents.

The server is written against ``KnowledgeReader`` so the store behind it can change (the Postgres
knowledge store in production, resolved incident files offline). Every tool is annotated read-only.
An empty answer means "nothing known"; a reader failure is an MCP error result, never an empty list.

A reader that can also browse (``KnowledgeBrowser``: the store's reader) serves the knowledge itself as
resources, read-only JSON: ``bamboo://knowledge/causes`` (the known causes, most incidents first, one page),
``bamboo://knowledge/causes{?q,offset}`` (filtered and paged) and ``bamboo://knowledge/causes/{cause_id}`` (one
cause with its incidents, resolutions and steps, each with the incidents it came from). A cause is addressed
by its id, never its name: a stored name is model output and may hold anything a URI cannot.

What a client sees on connecting is what the server is: its version is the package's, it advertises only
what it serves (the SDK registers resource and prompt handlers on every server, which then advertised
capabilities answered with empty lists: prompts never, resources only when the reader can browse), and each
tool's input schema carries its bounds (a non-empty text, ``limit`` 1-50), so a client can check a call
before making it.
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import PackageNotFoundError, version
from collections.abc import Awaitable
from typing import Annotated, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlencode

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.types import Annotations, ToolAnnotations
from pydantic import BaseModel, Field

from bamboo.store.knowledge_browse import MAX_QUERY, PAGE_SIZE, CauseDetail, CausePage, whole_number

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LIMIT = 50
DISTRIBUTION = "bamboo-temporal"
# Methods the SDK serves on every MCPServer that this server may not: prompts never, resources unless the
# reader can browse; nothing here changes, so there is nothing to subscribe to.
RESOURCE_METHODS = ("resources/list", "resources/read", "resources/templates/list")
UNSERVED_METHODS = ("resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get")
CAUSES_URI = "bamboo://knowledge/causes"
CAUSE_URI = CAUSES_URI + "/{cause_id}"
JSON = "application/json"

# The bounds are published in the schema and enforced by ``_check``, not by the SDK's argument model: its
# refusal is a multi-line validation report, ours one line saying what to send.
Limit = Annotated[int, Field(description=f"how many to return, 1 to {MAX_LIMIT}",
                             json_schema_extra={"minimum": 1, "maximum": MAX_LIMIT})]


def _text(what: str) -> object:
    return Field(description=what, json_schema_extra={"minLength": 1})


def server_version() -> str:
    """The installed package's version, which the server declares on initialize."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


class CauseMatch(BaseModel):
    cause: str
    detail: str = ""
    score: float = Field(description="0..1, higher is a closer match to the symptom")
    incident_count: int = 0


class IncidentMatch(BaseModel):
    incident_id: str
    summary: str
    cause: str | None = None
    resolution: str | None = None
    score: float


class ProcedureMatch(BaseModel):
    cause: str
    steps: list[str]
    tools: list[str] = Field(default_factory=list)
    times_used: int = 0


class KnowledgeReader(Protocol):
    """Read-only queries over accumulated knowledge; implementations must not write."""

    async def causes_for_symptom(self, symptom: str, limit: int) -> list[CauseMatch]: ...

    async def similar_incidents(self, description: str, limit: int) -> list[IncidentMatch]: ...

    async def procedures_for_cause(self, cause: str, limit: int) -> list[ProcedureMatch]: ...


@runtime_checkable
class KnowledgeBrowser(Protocol):
    """A reader that can also list the known causes and show one (``bamboo.store.knowledge_browse``)."""

    async def list_causes(self, query: str, offset: int, limit: int) -> CausePage: ...

    async def cause_detail(self, cause_id: int) -> CauseDetail | None: ...


class CausesAnswer(BaseModel):
    symptom: str
    causes: list[CauseMatch]


class IncidentsAnswer(BaseModel):
    description: str
    incidents: list[IncidentMatch]


class ProceduresAnswer(BaseModel):
    cause: str
    procedures: list[ProcedureMatch]


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _check(text: str, limit: int, what: str) -> int:
    if not text.strip():
        raise ToolError(f"{what} must not be empty")
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    return limit


def _offer_only_what_is_served(server: MCPServer, resources: bool) -> MCPServer:
    """Drop the handlers the SDK installs on every server that this one does not serve: capabilities are
    derived from the handlers present, and a capability whose list is always empty tells a client something
    false."""
    handlers = server._lowlevel_server._request_handlers  # the SDK has no public way to unregister a method
    for method in UNSERVED_METHODS + (() if resources else RESOURCE_METHODS):
        handlers.pop(method, None)
    return server


async def _reader_answer(what: str, coro: Awaitable[T], error: type[Exception]) -> T:
    """The reader's answer; a reader failure becomes ``error`` (the tool's or the resource's MCP error) saying
    what failed, never an empty answer. An ``error`` the reader raised itself passes as it is."""
    try:
        return await coro
    except error:
        raise
    except Exception as exc:
        log.exception("knowledge reader failed on %s", what)
        raise error(f"knowledge store unavailable ({what}): {type(exc).__name__}: {exc}") from exc


def _cause_uri(cause_id: int) -> str:
    return CAUSE_URI.replace("{cause_id}", str(cause_id))


def _page_json(page: CausePage) -> str:
    """The page with each cause's resource URI, and the next page's when there is one."""
    body = page.model_dump(mode="json")
    for cause in body["causes"]:
        cause["uri"] = _cause_uri(cause["id"])
    if page.has_next:
        body["next"] = f"{CAUSES_URI}?{urlencode({'q': page.query, 'offset': page.offset + len(page.causes)})}"
    return json.dumps(body)


def _serve_knowledge(server: MCPServer, browser: KnowledgeBrowser) -> None:
    """The knowledge as read-only resources: the first page of causes (listed), the filtered and paged list and
    one cause by id (templates)."""
    readable = Annotations(audience=["assistant", "user"])

    async def read(what: str, coro):
        return await _reader_answer(what, coro, ResourceError)

    @server.resource(CAUSES_URI, name="causes", title="Known causes", mime_type=JSON, annotations=readable)
    async def causes() -> str:
        """The known root causes, most incidents first (one page; `next` reads the following one), each with
        how many incidents name it, its most used resolutions and the URI of its details."""
        return _page_json(await read("causes", browser.list_causes("", 0, PAGE_SIZE)))

    # The filter is text to match, not a path: the SDK's path checks (``..``, a leading ``/``) do not apply.
    @server.resource(CAUSES_URI + "{?q,offset}", name="causes_matching", title="Known causes, filtered",
                     mime_type=JSON, annotations=readable, security=ResourceSecurity(exempt_params={"q"}))
    async def causes_matching(q: str = "", offset: str = "0") -> str:
        """Known causes whose name or description holds `q` (any case), from `offset`, most incidents first."""
        if len(q) > MAX_QUERY:
            raise ResourceError(f"q must be at most {MAX_QUERY} characters, got {len(q)}")
        skip = whole_number(offset)
        if skip is None:
            raise ResourceError(f"offset must be a whole number of causes to skip, got {offset!r}")
        return _page_json(await read("causes", browser.list_causes(q, skip, PAGE_SIZE)))

    @server.resource(CAUSE_URI, name="cause", title="One known cause", mime_type=JSON, annotations=readable)
    async def cause(cause_id: str) -> str:
        """One cause by its id: the incidents that name it, its resolutions and its investigation steps, each
        with the incidents it came from (graph ids)."""
        number = whole_number(cause_id)
        if number is None:
            raise ResourceNotFoundError(f"no cause {cause_id!r}: a cause is named by its id, as {CAUSES_URI} lists it")
        detail = await read("cause", browser.cause_detail(number))
        if detail is None:
            raise ResourceNotFoundError(f"no cause {cause_id}; {CAUSES_URI} lists the known ones")
        return detail.model_dump_json()


def build_knowledge_server(reader: KnowledgeReader, name: str = "bamboo-knowledge") -> MCPServer:
    server = MCPServer(name, instructions="Read-only knowledge learned from resolved PanDA incidents.",
                       version=server_version(), log_level="WARNING")

    async def ask(what: str, coro):
        return await _reader_answer(what, coro, ToolError)

    @server.tool(annotations=READ_ONLY)
    async def causes_for_symptom(
        symptom: Annotated[str, _text("an error message or a behaviour")], limit: Limit = 5,
    ) -> CausesAnswer:
        """Known root causes for a symptom (an error message or behaviour), best match first."""
        _check(symptom, limit, "symptom")
        return CausesAnswer(symptom=symptom, causes=await ask("causes_for_symptom", reader.causes_for_symptom(symptom, limit)))

    @server.tool(annotations=READ_ONLY)
    async def similar_incidents(
        description: Annotated[str, _text("what went wrong, in a sentence or an error")], limit: Limit = 5,
    ) -> IncidentsAnswer:
        """Resolved incidents most like a description, with their cause and resolution."""
        _check(description, limit, "description")
        found = await ask("similar_incidents", reader.similar_incidents(description, limit))
        return IncidentsAnswer(description=description, incidents=found)

    @server.tool(annotations=READ_ONLY)
    async def procedures_for_cause(
        cause: Annotated[str, _text("a root cause, as causes_for_symptom names it")], limit: Limit = 5,
    ) -> ProceduresAnswer:
        """Investigation procedures that were used for a known cause, most used first."""
        _check(cause, limit, "cause")
        return ProceduresAnswer(cause=cause, procedures=await ask("procedures_for_cause", reader.procedures_for_cause(cause, limit)))

    if isinstance(reader, KnowledgeBrowser):
        _serve_knowledge(server, reader)
    return _offer_only_what_is_served(server, resources=isinstance(reader, KnowledgeBrowser))
