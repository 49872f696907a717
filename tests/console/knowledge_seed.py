"""Learned knowledge written straight into a test's store, as populate writes it (the same graph write, its
provenance and its ``node_incidents`` counts), for the pages and resources that show the knowledge.

The causes are the bundled examples' reviewed ones; one more is named as hostile model output may name it
(markup, a link, a bidi override), and one is on more incidents than any list shows, so bounds are exercised.
"""

from __future__ import annotations

from dataclasses import dataclass

from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph
from bamboo.store.knowledge import GraphVectors, KnowledgeStore

HOSTILE_CAUSE = "<script>alert(1)</script> [read-only](http://evil.example/) **bold** \u202eevil\u202c"
COMMON_CAUSE = "Insufficient memory request"
COMMON_INCIDENTS = 60  # more than a cause's page lists (50) and than a resolution's sources (20)


@dataclass(frozen=True)
class Learned:
    task_id: int
    status: str
    symptom: str
    cause: str
    resolution: str
    steps: tuple[str, ...]

    @property
    def graph_id(self) -> str:
        return f"panda:{self.task_id}:{self.status}"

    @property
    def incident_id(self) -> str:
        return f"inc-{self.task_id}"


EXAMPLES = [
    Learned(40118507, "exhausted", "Payload PSS grows with every event", "Memory leak in payload",
            "Move to the patched release",
            ("Plot PSS versus event number from the memory monitor output of failed jobs",
             "Check whether other tasks with the same transUses show the same growth")),
    Learned(40127741, "finished", "Job killed by the batch system: walltime exceeded", "Walltime request too short",
            "Increase walltime and retry",
            ("Check the wall time of the failed jobs against the task walltime",
             "Check the CPU efficiency of finished jobs")),
    Learned(40133412, "exhausted", "Queue offline: site in downtime", "Site in scheduled downtime",
            "Retry after the downtime", ("Check the site's downtime calendar", "Check the queue status in CRIC")),
    Learned(40136621, "finished", "Queue offline: site in downtime", "Site in scheduled downtime",
            "Retry after the downtime", ("Check the site's downtime calendar", "Check the replicas of the input dataset")),
    Learned(40138090, "exhausted", "Input file missing at the storage endpoint", "Lost input file replica",
            "Recover or mark lost files and retry",
            ("Check the replicas of the failed input files in Rucio", "Check the storage endpoint's recent incidents")),
    Learned(40140001, "failed", "<img src=x onerror=alert(1)> [link](javascript:alert(1))", HOSTILE_CAUSE,
            "[Raise ramCount](http://evil.example/) <b>now</b>", ("`rm -rf /` <script>x</script>",)),
]
COMMON = [Learned(40200000 + n, "broken", "Payload ran out of memory: maxPSS exceeds ramCount", COMMON_CAUSE,
                  "Increase ramCount and retry" if n % 4 else "Increase ramCount per core",
                  ("Check the scout jobs' maxPSS against ramCount",
                   "Compare ramCount with the last successful task of the same sample"))
          for n in range(COMMON_INCIDENTS)]


def graph_of(learned: Learned) -> GraphWrite:
    graph = KnowledgeGraph()
    symptom = graph.add_node(GraphNode(kind="Symptom", name=learned.symptom))
    cause = graph.add_node(GraphNode(kind="Cause", name=learned.cause, description=f"{learned.cause}, as reviewed"))
    resolution = graph.add_node(GraphNode(kind="Resolution", name=learned.resolution))
    graph.add_edge(GraphEdge(src=symptom, kind="indicate", dst=cause))
    graph.add_edge(GraphEdge(src=cause, kind="solved_by", dst=resolution))
    for order, step in enumerate(learned.steps, 1):
        ref = graph.add_node(GraphNode(kind="Procedure", name=step, description=step))
        graph.add_edge(GraphEdge(src=cause, kind="investigated_by", dst=ref, params={"order": order}))
    return GraphWrite(graph_id=learned.graph_id, incident_id=learned.incident_id, task_id=learned.task_id,
                      graph=graph, summary=learned.symptom)


async def seed(knowledge: KnowledgeStore, learned: list[Learned] | None = None) -> list[Learned]:
    """Write the examples and the common cause's incidents (or ``learned``) in one group; no passages."""
    items = learned if learned is not None else EXAMPLES + COMMON
    await knowledge.write_graphs([GraphVectors(graph_of(item), []) for item in items])
    return items
