"""Which workflows and activities run on which task queue. One place, so the worker and the tests
register exactly the same thing."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Awaitable
from typing import Any, Callable

from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.accumulate import AccumulateActivities
from bamboo.services import Services
from workflows.accumulate import AccumulateIncident
from workflows.analyze import AnalyzeTask
from workflows.batch_analyze import BatchAnalyze
from workflows.exec_command import ExecCommand
from workflows.investigation import Investigation
from workflows.populate import PopulateBatch
from bamboo.contract import Queue
from worker.wiring import analyze_activities, investigation_activities

# cryptography verifies signed approvals inside the Investigation workflow. Its compiled core cannot be
# imported a second time by the workflow sandbox, and it imports its exception types lazily when a signature
# fails to verify; without passing it through, a forged signature aborted the whole worker process.
PASSTHROUGH_MODULES = ("cryptography",)


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))


WORKFLOWS: list[type] = [AccumulateIncident, PopulateBatch]
WORKFLOWS += [AnalyzeTask, BatchAnalyze]
WORKFLOWS += [Investigation]
WORKFLOWS += [ExecCommand]


@dataclass
class QueuePlan:
    queue: str
    activities: list[Callable[..., Any]] = field(default_factory=list)
    workflows: list[type] = field(default_factory=list)
    max_concurrent_activities: int = 100
    # Started with the worker, not awaited before it polls: connecting the external MCP servers, so the
    # first analysis finds them connected or waits for the one connection under way.
    on_start: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


def plan(services: Services, llm_concurrency: int, client: Client | None = None) -> list[QueuePlan]:
    acc = AccumulateActivities(services)
    inv = investigation_activities(services, client)
    ana = analyze_activities(services, inv.tools)  # the exploration sees the worker's whole catalogue
    plans = [
        QueuePlan(Queue.MAIN, workflows=WORKFLOWS, activities=[acc.load_incident, acc.load_prior_attempt]),  # local activities
        QueuePlan(Queue.LLM, activities=[acc.extract_incident, acc.review_extraction, acc.plan_review_exploration,
                                     acc.learn_slice],
                  max_concurrent_activities=llm_concurrency),
        QueuePlan(Queue.STORE, activities=[acc.store_graph, acc.list_incident_sources,
                                       acc.read_incident_sources], max_concurrent_activities=32),
    ]
    by_queue = {p.queue: p for p in plans}
    by_queue[Queue.LLM].activities += [ana.diagnose, ana.plan_exploration, ana.email]
    by_queue[Queue.STORE].activities += [ana.gather_evidence, ana.procedure_plan, ana.list_tasks, ana.read_tasks]
    by_queue[Queue.LLM].activities += inv.llm
    by_queue[Queue.STORE].activities += inv.store
    if inv.tools is not None:
        by_queue[Queue.LLM].on_start.append(inv.tools.connect)
    if inv.sandbox:
        plans.append(QueuePlan(Queue.SANDBOX, activities=inv.sandbox, max_concurrent_activities=4))
    return plans
