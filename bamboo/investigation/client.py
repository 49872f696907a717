"""Talking to Investigation sessions from any process: start, message, decide, revoke, query, list.

Everything goes through Temporal (no state of our own): a session is the workflow ``investigate:<id>``,
pending reviews are found through the ``BambooAwaitingApproval`` search attribute, and every request is a
signal or update naming what it answers, signed with the sender's key, so the CLI, a UI, a bot or
``temporal workflow signal`` (with the output of ``bamboo sign``) are interchangeable.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError

from bamboo.approvals.keys import DEFAULT_TTL_S, KeyStore, LocalKey
from bamboo.contract import AWAITING_APPROVAL, KIND, TASK_ID, Kind, Queue
from bamboo.investigation.contract import WORKFLOW_NAME, workflow_id
from bamboo.investigation.contract import (
    AbandonRequest, Ack, ApprovalsView, FinalizeRequest, InvestigationResult, InvestigationStart, OperatorMessage,
    PendingView, RevokeRequest,
    TranscriptEntry,
)
from bamboo.settings import Settings
from policy.decisions import DecisionKind, OperatorDecision
from policy.identity import canonical_identity
from policy.signing import StatementKind

# Built from the contract's search attributes, so a rename there reaches every front end's query.
PENDING_QUERY = f"{KIND.name} = '{Kind.INVESTIGATE}' AND {AWAITING_APPROVAL.name} = true AND ExecutionStatus = 'Running'"

DECISION_ALIASES: dict[str, DecisionKind] = {
    "y": DecisionKind.RUN_ONCE, "yes": DecisionKind.RUN_ONCE, "run": DecisionKind.RUN_ONCE,
    "run_once": DecisionKind.RUN_ONCE, "a": DecisionKind.AUTO_RUN, "auto": DecisionKind.AUTO_RUN,
    "auto_run": DecisionKind.AUTO_RUN, "k": DecisionKind.ALWAYS_ASK, "ask": DecisionKind.ALWAYS_ASK,
    "always_ask": DecisionKind.ALWAYS_ASK, "n": DecisionKind.REJECT, "no": DecisionKind.REJECT,
    "reject": DecisionKind.REJECT, "e": DecisionKind.EDIT, "edit": DecisionKind.EDIT,
}


UPDATE_TIMEOUT_S = 30.0
KINDS = {"message": StatementKind.MESSAGE, "decide": StatementKind.DECISION, "revoke": StatementKind.REVOKE,
         "finalize": StatementKind.FINALIZE, "abandon": StatementKind.ABANDON}


class InvestigationError(RuntimeError):
    """Something the operator must fix (wrong session, nothing pending, hash does not match, refused)."""

    def __init__(self, message: str, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class Speaker:
    """Who sends a request and the key that signs it (None: sent unsigned, for deployments that allow it)."""

    identity: str
    key: LocalKey | None = None
    ttl_s: float = DEFAULT_TTL_S

    @classmethod
    def of(cls, settings: Settings, identity: str) -> "Speaker":
        """``identity`` with its key from this machine's keys directory, when there is one."""
        identity = canonical_identity(identity)
        store = KeyStore(settings.resolved_keys_dir())
        return cls(identity, store.load(identity) if store.exists(identity) else None)

    def sign(self, name: str, session_id: str, request: BaseModel) -> BaseModel:
        if self.key is None:
            return request
        auth = self.key.authorize(KINDS[name], session_id, request.signed_body(),  # type: ignore[attr-defined]
                                  identity=self.identity, ttl_s=self.ttl_s)
        return request.model_copy(update={"auth": auth})



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
                cause: str | None = None) -> InvestigationStart:
    """The start input. It carries no approval rules: the worker applies the deployment's own."""
    return InvestigationStart(
        session_id=session_id, requester=requester, task_id=task_id, symptom=symptom, cause=cause,
        idle_timeout_s=settings.investigation_idle_timeout_s, startup_hypothesis=startup_hypothesis,
    )


async def start(client: Client, inp: InvestigationStart) -> WorkflowHandle:
    """Start the session, or attach to it if it is already running (a duplicate start is a no-op)."""
    attrs: list[SearchAttributePair[Any]] = [SearchAttributePair(KIND, Kind.INVESTIGATE.value),
             SearchAttributePair(AWAITING_APPROVAL, False)]
    if inp.task_id is not None:
        attrs.append(SearchAttributePair(TASK_ID, inp.task_id))
    try:
        return await client.start_workflow(
            WORKFLOW_NAME, inp, id=workflow_id(inp.session_id), task_queue=Queue.MAIN, result_type=InvestigationResult,
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
        # temporalio's converter decodes an Optional, but its stub takes only a plain `type`
        return await handle(client, session_id).query("pending", result_type=PendingView | None)  # type: ignore[arg-type]
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from exc


async def transcript(client: Client, session_id: str, since: int = 0) -> list[TranscriptEntry]:
    return await handle(client, session_id).query("transcript", since, result_type=list[TranscriptEntry])


async def approvals(client: Client, session_id: str) -> ApprovalsView:
    return await handle(client, session_id).query("approvals", result_type=ApprovalsView)


async def signal(client: Client, session_id: str, name: str, request: BaseModel, speaker: Speaker) -> None:
    """Send a signed request as a signal (fire and forget: a refusal shows in the transcript)."""
    await handle(client, session_id).signal(name, speaker.sign(name, session_id, request))


async def update(client: Client, session_id: str, name: str, request: BaseModel, speaker: Speaker,
                 timeout_s: float = UPDATE_TIMEOUT_S) -> Ack:
    """Send a signed request as an update and return the session's verdict; a refusal raises
    InvestigationError with the session's reason."""
    try:
        return await asyncio.wait_for(
            handle(client, session_id).execute_update(name, speaker.sign(name, session_id, request), result_type=Ack),
            timeout_s)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = getattr(cause, "message", None) or str(cause or exc)
        raise InvestigationError(message, getattr(cause, "type", None)) from None
    except asyncio.TimeoutError:
        raise InvestigationError(
            f"no worker answered within {timeout_s:.0f} s, so the request was not delivered; start one "
            "(`bamboo dev up` or `bamboo worker`) and send it again") from None
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from None


async def send_message(client: Client, session_id: str, text: str, speaker: Speaker, force_tool: bool = False,
                       fresh_code: bool = False) -> None:
    """``fresh_code`` asks for newly written code instead of a stored procedure that fits."""
    await signal(client, session_id, "message",
                 OperatorMessage(text=text, author=speaker.identity, force_tool=force_tool, fresh_code=fresh_code),
                 speaker)


async def send_decision(client: Client, session_id: str, decision: OperatorDecision, speaker: Speaker | None = None) -> None:
    """Send ``decision`` as a signal, signed by ``speaker`` when given (else exactly as it is)."""
    request = speaker.sign("decide", session_id, decision) if speaker else decision
    await handle(client, session_id).signal("decide", request)


async def decide_by_prefix(client: Client, session_id: str, hash_prefix: str, kind: DecisionKind, speaker: Speaker,
                           replacement_code: str | None = None, *, as_signal: bool = False) -> PendingView:
    """Answer the pending review whose code hash starts with ``hash_prefix``, naming its full hash (what the
    signature covers). The session re-checks everything; a refusal raises InvestigationError."""
    view = await pending(client, session_id)
    if view is None:
        raise InvestigationError(f"session {session_id} has nothing waiting for approval")
    if not view.code_hash.startswith(hash_prefix.strip().lower()):
        raise InvestigationError(
            f"the pending code in {session_id} has hash {view.code_hash[:12]}, not {hash_prefix}; "
            "run `bamboo approvals` to see what is waiting"
        )
    decision = OperatorDecision(turn=view.turn, code_hash=view.code_hash, kind=kind, approver=speaker.identity,
                                replacement_code=replacement_code)
    if as_signal:
        await send_decision(client, session_id, decision, speaker)
    else:
        await update(client, session_id, "decide", decision, speaker)
    return view


async def revoke(client: Client, session_id: str, target: str, speaker: Speaker) -> None:
    await signal(client, session_id, "revoke", RevokeRequest(target=target, actor=speaker.identity), speaker)


async def finalize(client: Client, session_id: str, cause: str, resolution: str, speaker: Speaker) -> None:
    request = FinalizeRequest(cause=cause, resolution=resolution, actor=speaker.identity)
    await signal(client, session_id, "finalize", request, speaker)


async def abandon(client: Client, session_id: str, speaker: Speaker, reason: str = "") -> None:
    await signal(client, session_id, "abandon", AbandonRequest(actor=speaker.identity, reason=reason), speaker)


class PendingApproval(BaseModel):
    session_id: str
    view: PendingView


async def list_pending(client: Client, limit: int = 100, unanswered: list[str] | None = None) -> list[PendingApproval]:
    """Pending reviews across sessions: the search attribute finds candidates, the query confirms each. A
    session whose query no worker answers is added to ``unanswered`` when given (it may well be waiting)."""
    found: list[PendingApproval] = []
    async for execution in client.list_workflows(PENDING_QUERY, limit=limit):
        session = session_of(execution.id)
        try:
            view = await pending(client, session)
        except InvestigationError:
            if unanswered is not None:
                unanswered.append(session)
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

