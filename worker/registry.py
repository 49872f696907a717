"""Which workflows and activities run on which task queue. One place, so the worker and the tests
register exactly the same thing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from activities.accumulate import AccumulateActivities
from bamboo.services import Services
from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch
from workflows.queues import Queues

WORKFLOWS: list[type] = [AccumulateIncident, PopulateBatch]


@dataclass
class QueuePlan:
    queue: str
    activities: list[Callable[..., Any]] = field(default_factory=list)
    workflows: list[type] = field(default_factory=list)
    max_concurrent_activities: int = 100


def plan(services: Services, llm_concurrency: int) -> list[QueuePlan]:
    acc = AccumulateActivities(services)
    q = Queues()
    return [
        QueuePlan(q.main, workflows=WORKFLOWS),
        QueuePlan(q.llm, activities=[acc.extract_incident, acc.review_extraction],
                  max_concurrent_activities=llm_concurrency),
        QueuePlan(q.store, activities=[acc.load_incident, acc.store_graph, acc.list_incident_sources,
                                       acc.read_incident_sources], max_concurrent_activities=32),
    ]
