"""The knowledge graph as it travels between extraction, review and the store.

Nodes are identified by (kind, name) everywhere — the store's unique key — so an edge never has
to carry a database id and a re-extraction of the same incident produces the same graph.
One edge kind per meaning: the same kind is written and queried.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

NodeKind = Literal[
    "Symptom", "Cause", "Resolution", "Procedure", "Task_Feature", "Task_Context", "Environment", "Component"
]
EdgeKind = Literal[
    "indicate", "solved_by", "investigated_by", "depends_on", "contribute_to", "originated_from", "associated_with"
]

# (source kind, edge kind, target kind) triples the pipeline writes and the analysis queries.
EDGE_SHAPES: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("Symptom", "indicate", "Cause"),
        ("Cause", "solved_by", "Resolution"),
        ("Cause", "investigated_by", "Procedure"),
        ("Procedure", "depends_on", "Procedure"),
        ("Task_Feature", "contribute_to", "Cause"),
        ("Component", "originated_from", "Cause"),
        ("Environment", "associated_with", "Cause"),
        ("Task_Feature", "associated_with", "Symptom"),
    }
)

MAX_DESCRIPTION = 2000
# The store's unique key is (kind, name): a name is a label, never a document.
MAX_NAME = 300


class NodeRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: NodeKind
    name: str = Field(min_length=1, max_length=MAX_NAME)

    def key(self) -> tuple[str, str]:
        return (self.kind, self.name)


class GraphNode(BaseModel):
    kind: NodeKind
    name: str = Field(min_length=1, max_length=MAX_NAME)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    props: dict[str, Any] = Field(default_factory=dict)

    @property
    def ref(self) -> NodeRef:
        return NodeRef(kind=self.kind, name=self.name)


class GraphEdge(BaseModel):
    src: NodeRef
    kind: EdgeKind
    dst: NodeRef
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    params: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> tuple[tuple[str, str], str, tuple[str, str]]:
        return (self.src.key(), self.kind, self.dst.key())


class KnowledgeGraph(BaseModel):
    nodes: list[GraphNode] = Field(default_factory=list)
    edges: list[GraphEdge] = Field(default_factory=list)
    _edge_keys: tuple[list[GraphEdge], set] | None = PrivateAttr(default=None)

    def add_node(self, node: GraphNode) -> NodeRef:
        # Compare plain fields: building a NodeRef per existing node made extraction quadratic in pydantic objects.
        for existing in self.nodes:
            if existing.kind == node.kind and existing.name == node.name:
                if not existing.description and node.description:
                    existing.description = node.description
                existing.props.update({k: v for k, v in node.props.items() if k not in existing.props})
                return existing.ref
        self.nodes.append(node)
        return node.ref

    def add_edge(self, edge: GraphEdge) -> None:
        if (edge.src.kind, edge.kind, edge.dst.kind) not in EDGE_SHAPES:
            raise ValueError(f"edge shape {edge.src.kind} -{edge.kind}-> {edge.dst.kind} is not part of the schema")
        key = edge.key()
        keys = self._keys_of_edges()
        if key not in keys:
            self.edges.append(edge)
            keys.add(key)

    def _keys_of_edges(self) -> set:
        """Keys of `edges`, kept between calls: scanning every edge per added edge made building a
        graph quadratic. Rebuilt whenever the list was replaced or changed size behind our back."""
        cached = self._edge_keys
        if cached is None or cached[0] is not self.edges or len(cached[1]) != len(self.edges):
            cached = (self.edges, {e.key() for e in self.edges})
            self._edge_keys = cached
        return cached[1]

    def of_kind(self, kind: str) -> list[GraphNode]:
        return [n for n in self.nodes if n.kind == kind]

    def validate_refs(self) -> list[str]:
        """Edges that point at nodes the graph does not contain (an extraction bug, reported not stored)."""
        known = {(n.kind, n.name) for n in self.nodes}
        return [f"{e.src.kind}:{e.src.name} -{e.kind}-> {e.dst.kind}:{e.dst.name}" for e in self.edges
                if e.src.key() not in known or e.dst.key() not in known]


class PassageDraft(BaseModel):
    """Text to embed for retrieval. Its id is derived from (graph_id, section, key): deterministic."""

    section: str
    key: str
    content: str = Field(max_length=8000)
    node: NodeRef | None = None


class GraphWrite(BaseModel):
    graph_id: str
    incident_id: str
    task_id: int | None = None
    graph: KnowledgeGraph
    passages: list[PassageDraft] = Field(default_factory=list)
    summary: str = ""
    warnings: list[str] = Field(default_factory=list)


class WriteStats(BaseModel):
    graph_id: str
    nodes: int
    edges: int
    passages: int
