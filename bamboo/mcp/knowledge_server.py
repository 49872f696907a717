"""Bamboo as an MCP server: what it has learned, offered read-only to other agents.

The server is written against ``KnowledgeReader`` so the store behind it can change (the Postgres
knowledge store in production, resolved incident files offline). Every tool is annotated read-only.
An empty answer means "nothing known"; a reader failure is an MCP error result, never an empty list.

What a client sees on connecting is what the server is: its version is the package's, it advertises tools
only (the SDK registers resource and prompt handlers on every server, which then advertised capabilities
answered with empty lists), and each tool's input schema carries its bounds (a non-empty text, ``limit``
1-50), so a client can check a call before making it.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Protocol

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

MAX_LIMIT = 50
DISTRIBUTION = "bamboo-temporal"
# Methods the SDK serves on every MCPServer; this server has no resources or prompts, so it does not offer them.
UNSERVED_METHODS = ("resources/list", "resources/read", "resources/templates/list", "resources/subscribe",
                    "resources/unsubscribe", "prompts/list", "prompts/get")

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


def _offer_tools_only(server: MCPServer) -> MCPServer:
    """Drop the resource and prompt handlers the SDK installs on every server: capabilities are derived from
    the handlers present, and a capability whose list is always empty tells a client something false."""
    handlers = server._lowlevel_server._request_handlers  # the SDK has no public way to unregister a method
    for method in UNSERVED_METHODS:
        handlers.pop(method, None)
    return server


def build_knowledge_server(reader: KnowledgeReader, name: str = "bamboo-knowledge") -> MCPServer:
    server = MCPServer(name, instructions="Read-only knowledge learned from resolved PanDA incidents.",
                       version=server_version(), log_level="WARNING")

    async def ask(what: str, coro):
        try:
            return await coro
        except ToolError:
            raise
        except Exception as exc:
            log.exception("knowledge reader failed on %s", what)
            raise ToolError(f"knowledge store unavailable ({what}): {type(exc).__name__}: {exc}") from exc

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

    return _offer_tools_only(server)
