"""Talking to Investigation sessions from any process: start, message, decide, revoke, query, list.

Everything goes through Temporal (no state of our own): a session is the workflow ``investigate:<id>``,
pending reviews are found through the ``BambooAwaitingApproval`` search attribute, and a decision is a
signal naming the turn and code hash it answers, so the CLI, a UI, a bot or ``temporal workflow signal``
are interchangeable.
"""

from __future__ import annotations

import asyncio
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError

from bamboo.models.investigation import (
    AbandonRequest, ApprovalsView, FinalizeRequest, InvestigationResult, InvestigationStart, OperatorMessage,
    PendingView, RevokeRequest,
    TranscriptEntry,
)
from bamboo.settings import Settings
from policy.approvers import ApproverRules
from policy.decisions import DecisionKind, OperatorDecision

# Compatibility data, pinned by a test against workflows/names.py (bamboo/ may not import workflows/).
WORKFLOW_NAME = "Investigation"
MAIN_QUEUE = "bamboo"
PENDING_QUERY = "BambooKind = 'investigate' AND BambooAwaitingApproval = true AND ExecutionStatus = 'Running'"

DECISION_ALIASES: dict[str, DecisionKind] = {
    "y": DecisionKind.RUN_ONCE, "yes": DecisionKind.RUN_ONCE, "run": DecisionKind.RUN_ONCE,
    "run_once": DecisionKind.RUN_ONCE, "a": DecisionKind.AUTO_RUN, "auto": DecisionKind.AUTO_RUN,
    "auto_run": DecisionKind.AUTO_RUN, "k": DecisionKind.ALWAYS_ASK, "ask": DecisionKind.ALWAYS_ASK,
    "always_ask": DecisionKind.ALWAYS_ASK, "n": DecisionKind.REJECT, "no": DecisionKind.REJECT,
    "reject": DecisionKind.REJECT, "e": DecisionKind.EDIT, "edit": DecisionKind.EDIT,
}


class InvestigationError(RuntimeError):
    """Something the operator must fix (wrong session, nothing pending, hash does not match)."""


def workflow_id(session_id: str) -> str:
    return f"investigate:{session_id}"


def session_of(workflow_id_: str) -> str:
    return workflow_id_.removeprefix("investigate:")


def parse_decision(text: str) -> DecisionKind:
    kind = DECISION_ALIASES.get(text.strip().lower())
    if kind is None:
        raise InvestigationError(
            f"unknown decision {text!r}; use one of y (run once), a (auto-run), k (always ask), e (edit), n (reject)"
        )
    return kind


def start_input(settings: Settings, session_id: str, requester: str, *, task_id: int | None = None,
                symptom: str | None = None, startup_hypothesis: bool = True,
                allow_mutating_autorun: bool | None = None) -> InvestigationStart:
    """The start input, with approver rules and limits taken from settings (so every client agrees)."""
    rules = ApproverRules.model_validate(settings.model_dump(include={
        "approvers_read_only", "approvers_state_changing", "require_distinct_approver"}))
    return InvestigationStart(
        session_id=session_id, requester=requester, task_id=task_id, symptom=symptom, rules=rules,
        allow_mutating_autorun=settings.allow_mutating_autorun if allow_mutating_autorun is None
        else allow_mutating_autorun,
        idle_timeout_s=settings.investigation_idle_timeout_s, startup_hypothesis=startup_hypothesis,
    )


async def start(client: Client, inp: InvestigationStart) -> WorkflowHandle:
    """Start the session, or attach to it if it is already running (a duplicate start is a no-op)."""
    attrs = [SearchAttributePair(SearchAttributeKey.for_keyword("BambooKind"), "investigate"),
             SearchAttributePair(SearchAttributeKey.for_bool("BambooAwaitingApproval"), False)]
    if inp.task_id is not None:
        attrs.append(SearchAttributePair(SearchAttributeKey.for_int("BambooTaskId"), inp.task_id))
    try:
        return await client.start_workflow(
            WORKFLOW_NAME, inp, id=workflow_id(inp.session_id), task_queue=MAIN_QUEUE, result_type=InvestigationResult,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(attrs),
        )
    except Exception as exc:  # WorkflowAlreadyStartedError and friends: attach instead
        if "already" not in str(exc).lower():
            raise
        return handle(client, inp.session_id)


def handle(client: Client, session_id: str) -> WorkflowHandle:
    return client.get_workflow_handle(workflow_id(session_id), result_type=InvestigationResult)


async def pending(client: Client, session_id: str) -> PendingView | None:
    try:
        return await handle(client, session_id).query("pending", result_type=PendingView | None)
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from exc


async def transcript(client: Client, session_id: str, since: int = 0) -> list[TranscriptEntry]:
    return await handle(client, session_id).query("transcript", since, result_type=list[TranscriptEntry])


async def approvals(client: Client, session_id: str) -> ApprovalsView:
    return await handle(client, session_id).query("approvals", result_type=ApprovalsView)


async def send_message(client: Client, session_id: str, text: str, author: str, force_tool: bool = False) -> None:
    await handle(client, session_id).signal("message", OperatorMessage(text=text, author=author, force_tool=force_tool))


async def send_decision(client: Client, session_id: str, decision: OperatorDecision) -> None:
    await handle(client, session_id).signal("decide", decision)


async def decide_by_prefix(client: Client, session_id: str, hash_prefix: str, kind: DecisionKind, approver: str,
                           replacement_code: str | None = None) -> PendingView:
    """Answer the pending review whose code hash starts with ``hash_prefix``; the workflow re-checks it all."""
    view = await pending(client, session_id)
    if view is None:
        raise InvestigationError(f"session {session_id} has nothing waiting for approval")
    if not view.code_hash.startswith(hash_prefix.strip().lower()):
        raise InvestigationError(
            f"the pending code in {session_id} has hash {view.code_hash[:12]}, not {hash_prefix}; "
            "run `bamboo approvals` to see what is waiting"
        )
    await send_decision(client, session_id, OperatorDecision(
        turn=view.turn, code_hash=hash_prefix, kind=kind, approver=approver, replacement_code=replacement_code))
    return view


async def revoke(client: Client, session_id: str, target: str, actor: str) -> None:
    await handle(client, session_id).signal("revoke", RevokeRequest(target=target, actor=actor))


async def finalize(client: Client, session_id: str, cause: str, resolution: str, actor: str) -> None:
    request = FinalizeRequest(cause=cause, resolution=resolution, actor=actor)
    await handle(client, session_id).signal("finalize", request)


async def abandon(client: Client, session_id: str, actor: str, reason: str = "") -> None:
    await handle(client, session_id).signal("abandon", AbandonRequest(actor=actor, reason=reason))


class PendingApproval(BaseModel):
    session_id: str
    view: PendingView


async def list_pending(client: Client, limit: int = 100) -> list[PendingApproval]:
    """Pending reviews across sessions: the search attribute finds candidates, the query confirms each."""
    found: list[PendingApproval] = []
    async for execution in client.list_workflows(PENDING_QUERY, limit=limit):
        session = session_of(execution.id)
        try:
            view = await pending(client, session)
        except InvestigationError:
            continue
        if view is not None:
            found.append(PendingApproval(session_id=session, view=view))
    return found


async def wait_until(probe, timeout_s: float, every_s: float = 0.5):
    """Poll an async ``probe`` until it returns something truthy, or None after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(every_s)
    return None

