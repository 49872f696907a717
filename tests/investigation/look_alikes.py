"""Workflows a requester may run under a session's id with the access the CLI needs, answered by a worker of her own:
what the front ends must not show, narrate or list as a session (``bamboo.investigation.client.genuine``).

``ForgedRecord`` is of her own type; ``Impostor`` takes the product's workflow type (run on a queue a test names
the deployment's with ``SESSION_QUEUE``, it stands for another investigation chain taking a closed session's id).
Both answer the queries a front end reads with a story of her choosing: bob approved, the run changed nothing.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy

from bamboo.contract import AWAITING_APPROVAL, KIND, Kind
from bamboo.investigation.contract import WORKFLOW_NAME, workflow_id

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC).isoformat()
FORGED_DECISION = "bob chose run_once"
FORGED_RUN = "ok: read-only, nothing changed"
FORGED_NOTICE = "all clear: the kill was reverted, nothing to do"
FORGED_POLICY_HASH = "ab" * 32
REVEAL_S = 2.0


def _entries(since: int) -> list[dict]:
    entries = [
        {"seq": 1, "at": AT, "kind": "decision", "turn": 1, "text": FORGED_DECISION, "actor": "bob"},
        {"seq": 2, "at": AT, "kind": "run", "turn": 1, "text": FORGED_RUN, "data": {"calls": []}},
        {"seq": 3, "at": AT, "kind": "notice", "text": FORGED_NOTICE},
    ]
    return [e for e in entries if e["seq"] > since]


def _approvals() -> dict:
    return {"session_policies": {FORGED_POLICY_HASH: {"policy": "auto_run", "approved_by": "bob", "turn": 1}},
            "grants": {}}


class _Story:
    """The story appears ``REVEAL_S`` after the start (so a front end following the workflow sees it as news)."""

    def __init__(self) -> None:
        self.shown = 0

    async def _tell(self, linger_s: float) -> None:
        await workflow.sleep(REVEAL_S)
        self.shown = 3
        await workflow.sleep(linger_s)

    @workflow.query(name="transcript")
    def transcript(self, since: int = 0) -> list[dict]:
        return [e for e in _entries(since) if e["seq"] <= self.shown]

    @workflow.query(name="approvals")
    def approvals(self) -> dict:
        return _approvals()

    @workflow.query(name="status")
    def status(self) -> str:
        return "active"

    @workflow.query(name="pending")
    def pending(self) -> None:
        return None


@workflow.defn(name="RequestersOwnRecord", sandboxed=False)
class ForgedRecord(_Story):
    @workflow.run
    async def run(self, linger_s: float) -> None:
        await self._tell(linger_s)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class Impostor(_Story):
    @workflow.run
    async def run(self, linger_s: float) -> None:
        await self._tell(linger_s)


def marked(awaiting: bool = False) -> TypedSearchAttributes:
    """The search attributes a session carries, which any starter may set."""
    return TypedSearchAttributes([SearchAttributePair(KIND, Kind.INVESTIGATE.value),
                                  SearchAttributePair(AWAITING_APPROVAL, awaiting)])


async def start(client: Client, workflow_type: str, session_id: str, queue: str, linger_s: float = 3600.0, *,
                awaiting: bool = False):
    """Start ``workflow_type`` under the session's id (allowed to reuse a closed one's, as Temporal's default is)."""
    return await client.start_workflow(workflow_type, linger_s, id=workflow_id(session_id), task_queue=queue,
                                       search_attributes=marked(awaiting),
                                       id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)


def new_queue(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"
