"""Talking to Investigation sessions from any process: start, message, decide, revoke, query, list.

Every front end (the CLI, the console, the Mattermost bot) goes through this module, mostly through
``InvestigationClient`` (docs/adding-a-front-end.md): no front end calls Temporal its own way or names a signal,
update or query itself (the names are the contract's ``Message`` and ``Query``).

Everything goes through Temporal (no state of our own): a session is the workflow ``investigate:<id>``,
pending reviews are found through the ``BambooAwaitingApproval`` search attribute, and every request is a
signal or update naming what it answers, signed with the sender's key, so the CLI, a UI, a bot or
``temporal workflow signal`` (with the output of ``bamboo sign``) are interchangeable.

A decision must arrive even while no worker runs (a restart, a deploy): an update needs a worker to answer,
so when none does, the same signed decision is sent as a signal, which the server keeps until the session
judges it, through the same admission as any decision, when a worker runs again. What it answers (turn, full
code hash) is read from the memo the session publishes while a review waits (``PENDING_MEMO``), which the
server answers without a worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import (
    Client, WorkflowExecutionDescription, WorkflowHandle, WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from bamboo.approvals.keys import DEFAULT_TTL_S, KeyStore, LocalKey
from bamboo.contract import AWAITING_APPROVAL, KIND, TASK_ID, Kind, Queue
from bamboo.investigation.contract import MESSAGE_KINDS, PENDING_MEMO, WORKFLOW_NAME, Message, Query, workflow_id
from bamboo.investigation.contract import (
    AbandonRequest, Ack, ApprovalsView, FinalizeRequest, InvestigationResult, InvestigationStart, OperatorMessage,
    PendingMemo, PendingView, RevokeRequest, SessionStatus,
    TranscriptEntry,
)
from bamboo.settings import Settings
from policy import code_identity
from policy.decisions import DecisionKind, OperatorDecision
from policy.identity import canonical_identity

# Built from the contract's search attributes, so a rename there reaches every front end's query. The search
# attributes are the starter's to choose, so every list also names the workflow type and the queue our workers poll
# (read when called: a workflow test runs its workers on a queue of its own): a requester's own workflows marked as
# investigations awaiting approval were listed as sessions, and a hundred of them pushed every real review off the
# approvals list.
def sessions_query() -> str:
    return f"WorkflowType = '{WORKFLOW_NAME}' AND TaskQueue = '{SESSION_QUEUE}' AND {KIND.name} = '{Kind.INVESTIGATE}'"


def pending_query() -> str:
    return f"{sessions_query()} AND {AWAITING_APPROVAL.name} = true AND ExecutionStatus = 'Running'"

DECISION_ALIASES: dict[str, DecisionKind] = {
    "y": DecisionKind.RUN_ONCE, "yes": DecisionKind.RUN_ONCE, "run": DecisionKind.RUN_ONCE,
    "run_once": DecisionKind.RUN_ONCE, "a": DecisionKind.AUTO_RUN, "auto": DecisionKind.AUTO_RUN,
    "auto_run": DecisionKind.AUTO_RUN, "k": DecisionKind.ALWAYS_ASK, "ask": DecisionKind.ALWAYS_ASK,
    "always_ask": DecisionKind.ALWAYS_ASK, "n": DecisionKind.REJECT, "no": DecisionKind.REJECT,
    "reject": DecisionKind.REJECT, "e": DecisionKind.EDIT, "edit": DecisionKind.EDIT,
}


UPDATE_TIMEOUT_S = 30.0
# Hex characters of a hash or review key a typed answer needs: 128 bits, so no two can be made to share them.
MIN_HASH_PREFIX = 32
# How long a query may wait for a worker before the client reads the memo instead (no worker answers).
QUERY_TIMEOUT_S = 10.0
KINDS = MESSAGE_KINDS  # kept for callers that sign by name
DURABLE_DETAIL = "delivered; the session will judge it when a worker runs (its verdict shows in the transcript)"


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
    # The deployment the requests are for (settings.resolved_deployment()): signed into each, so a decision counts
    # in that deployment's sessions only.
    deployment: str = field(kw_only=True)

    @classmethod
    def of(cls, settings: Settings, identity: str) -> "Speaker":
        """``identity`` with its key from this machine's keys directory, when there is one."""
        identity = canonical_identity(identity)
        store = KeyStore(settings.resolved_keys_dir())
        return cls(identity, store.load(identity) if store.exists(identity) else None,
                   deployment=settings.resolved_deployment())

    def sign(self, name: Message | str, session_id: str, request: BaseModel) -> BaseModel:
        if self.key is None:
            return request
        auth = self.key.authorize(MESSAGE_KINDS[Message(name)], session_id, request.signed_body(),  # type: ignore[attr-defined]
                                  deployment=self.deployment, identity=self.identity, ttl_s=self.ttl_s)
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


async def start(client: Client, inp: InvestigationStart, *, attach: bool = True) -> WorkflowHandle:
    """Start the session, or attach to it if it is already running (a duplicate start is a no-op); with
    ``attach=False`` a session of that name, started by anyone, is an InvestigationError instead."""
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
        if not attach:
            raise InvestigationError(f"a session named {inp.session_id} already exists; it was not started here") from None
        return handle(client, inp.session_id)


def handle(client: Client, session_id: str, run_id: str | None = None) -> WorkflowHandle:
    return client.get_workflow_handle(workflow_id(session_id), run_id=run_id, result_type=InvestigationResult)


class NotASession(InvestigationError):
    """The workflow under a session's id is not an investigation run by this deployment's workers (``genuine``)."""


class NotThisSession(NotASession):
    """The session's id is held by another run chain than the one a front end opened (``genuine(first_run=…)``):
    the session that was there ended and its id was taken again."""


class Unanswered(InvestigationError):
    """No worker answered a query or an update (none runs, or it is restarting): the session itself is fine."""


async def _query(client: Client, session_id: str, name: Query, *args: Any, result_type: Any,
                 timeout_s: float | None = None, run_id: str | None = None) -> Any:
    """``timeout_s`` bounds the wait for a worker (None: the server's own bound); ``run_id`` names the run asked
    (None: whichever holds the id now)."""
    try:
        return await handle(client, session_id, run_id).query(
            name, *args, result_type=result_type,
            rpc_timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None)
    except RPCError as exc:
        raise Unanswered(f"cannot reach session {session_id}: {exc.message}") from exc


async def pending(client: Client, session_id: str, timeout_s: float | None = None,
                  first_run: str | None = None) -> PendingView | None:
    """The review waiting in the session, in full (needs a worker; ``pending_memo`` does not). Whatever answers
    the query is believed only as far as it can be checked: code that does not hash to the hash an answer would
    sign is refused before anyone sees it (a worker of someone else's on a session id they started showed
    harmless code beside the hash of other code; the review key, which names the run, keeps such an answer from
    counting anywhere else, and this keeps it from being given)."""
    desc = await genuine(client, session_id, first_run)
    view = await _query(client, session_id, Query.PENDING, result_type=PendingView | None, timeout_s=timeout_s,
                        run_id=desc.run_id)
    if view is not None and code_identity.code_hash(view.code) != view.code_hash.lower():
        raise InvestigationError(
            f"session {session_id} shows code that does not hash to the hash an approval would sign: it is not run "
            "by this deployment's worker; do not answer it, and tell the deployment's administrators")
    return view


async def pending_memo(client: Client, session_id: str, first_run: str | None = None) -> PendingMemo | None:
    """What a decision must name (turn, full hash), as the session published it on the server: readable while
    no worker runs. None when nothing waits; InvestigationError for a workflow that is not a session
    (``genuine``), or for a memo the session did not publish: the memo a session starts with is its starter's
    (the workflow clears it once a worker runs it), and until then `bamboo approvals` showed a requester's forged
    review as the session's. The session's own names the chain's first run, which a starter cannot know."""
    desc = await genuine(client, session_id, first_run)
    value = await desc.memo_value(PENDING_MEMO, None)
    if not value:
        return None
    memo = PendingMemo.model_validate(value)
    if memo.run != first_run_of(desc):
        raise InvestigationError(
            f"the pending review in session {session_id}'s memo names another run than the session's first: the "
            "session did not publish it (whoever starts a session writes its first memo); nothing of it is shown "
            "or answered here until a worker runs the session")
    return memo


async def genuine(client: Client, session_id: str, first_run: str | None = None) -> WorkflowExecutionDescription:
    """Raise InvestigationError unless the session's workflow is an investigation on the queue this deployment's
    workers poll, and so was the first run of its chain. Anyone with the access the CLI needs can start a workflow
    under an unused session id: of our type on a queue no worker of ours polls, with a memo and search attributes
    of their choosing (or another type, answered by a worker of their own), even one that continues-as-new into a
    run of ours with the memo it likes. What it publishes is theirs, and a statement signed for it was theirs to
    replay into a real session they then started under the same id. Nothing is signed, and no memo believed, for
    such a run. (A first run the server no longer keeps is not held against a session: the worker checked every
    run of the chain against the one before it when it started.) Returns the current run's description.

    Every read a front end shows goes through here too (transcript, standing approvals, status, the pending
    review): a requester's own workflow under an unused id, or under a closed session's id taken again, had its
    worker's story ("bob chose run_once", an auto-run approval by bob) shown and narrated as the session's record.
    ``first_run``, when given, is the first run of the chain a front end opened or showed (``first_run_of``): a
    session whose id now holds another chain, even a real investigation, is ``NotThisSession``."""
    desc = await _described(client, session_id)
    await _check_chain(client, session_id, desc, first_run)
    return desc


def first_run_of(desc: WorkflowExecutionDescription) -> str:
    """The first run of the chain ``desc`` belongs to: the server's name for one session, through continue-as-new."""
    return desc.raw_description.workflow_execution_info.first_run_id or desc.run_id


# First runs already found to be investigations on our queue, per (workflow id, first run, queue): what type and
# queue a run has never changes, so a chain that continued as new costs one more describe per process, not per read.
_CHECKED_FIRST_RUNS: dict[tuple[str, str, str], None] = {}
_CHECKED_FIRST_RUNS_MAX = 4096


async def _check_chain(client: Client, session_id: str, desc: WorkflowExecutionDescription,
                       first_run: str | None) -> None:
    _check_genuine(desc, session_id)
    first = first_run_of(desc)
    if first_run is not None and first != first_run:
        raise NotThisSession(
            f"{workflow_id(session_id)} is now another run chain (first run {first}) than the session shown here (first "
            f"run {first_run or 'not recorded'}): that session ended and its id was taken again; nothing of the new "
            "one is shown, signed or sent from here")
    if first != desc.run_id:
        await _check_first_run(client, session_id, first)


async def _check_first_run(client: Client, session_id: str, first: str) -> None:
    """NotASession unless the chain's first run ``first`` was an investigation on our queue (or is no longer kept)."""
    key = (workflow_id(session_id), first, SESSION_QUEUE)
    if key in _CHECKED_FIRST_RUNS:
        return
    try:
        first_desc = await client.get_workflow_handle(workflow_id(session_id), run_id=first).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from None
    _check_genuine(first_desc, session_id)
    if len(_CHECKED_FIRST_RUNS) >= _CHECKED_FIRST_RUNS_MAX:
        _CHECKED_FIRST_RUNS.clear()
    _CHECKED_FIRST_RUNS[key] = None


async def _described(client: Client, session_id: str) -> WorkflowExecutionDescription:
    try:
        return await handle(client, session_id).describe()
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from None


# The queue this deployment's workers run sessions on (a workflow test runs its own workers on a queue of its own).
SESSION_QUEUE: str = Queue.MAIN
# The lists as a deployment runs them (scripts count with these; the client builds them when it lists).
SESSIONS_QUERY = sessions_query()
PENDING_QUERY = pending_query()


def _check_genuine(desc: WorkflowExecutionDescription, session_id: str) -> None:
    if desc.workflow_type != WORKFLOW_NAME or desc.task_queue != SESSION_QUEUE:
        raise NotASession(
            f"{workflow_id(session_id)} is not an investigation run by this deployment's workers (its type or task "
            "queue differs): nothing was signed or sent to it; tell the deployment's administrators who started it")


async def _read(client: Client, session_id: str, name: Query, *args: Any, result_type: Any,
                timeout_s: float | None, first_run: str | None) -> Any:
    """A query of the session's run, once ``genuine`` (NotASession otherwise), asked of that very run."""
    desc = await genuine(client, session_id, first_run)
    return await _query(client, session_id, name, *args, result_type=result_type, timeout_s=timeout_s,
                        run_id=desc.run_id)


async def transcript(client: Client, session_id: str, since: int = 0, *, timeout_s: float | None = None,
                     first_run: str | None = None) -> list[TranscriptEntry]:
    return await _read(client, session_id, Query.TRANSCRIPT, since, result_type=list[TranscriptEntry],
                       timeout_s=timeout_s, first_run=first_run)


async def approvals(client: Client, session_id: str, *, timeout_s: float | None = None,
                    first_run: str | None = None) -> ApprovalsView:
    return await _read(client, session_id, Query.APPROVALS, result_type=ApprovalsView, timeout_s=timeout_s,
                       first_run=first_run)


async def status(client: Client, session_id: str, *, timeout_s: float | None = None,
                 first_run: str | None = None) -> SessionStatus:
    return await _read(client, session_id, Query.STATUS, result_type=SessionStatus, timeout_s=timeout_s,
                       first_run=first_run)


async def signal(client: Client, session_id: str, name: Message | str, request: BaseModel, speaker: Speaker) -> None:
    """Send a signed request as a signal (fire and forget: a refusal shows in the transcript). ``name`` must be
    one of the contract's ``Message`` names (a string that is not fails here)."""
    name = Message(name)
    await genuine(client, session_id)
    try:
        await handle(client, session_id).signal(name, speaker.sign(name, session_id, request))
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from None


async def update(client: Client, session_id: str, name: Message | str, request: BaseModel, speaker: Speaker,
                 timeout_s: float = UPDATE_TIMEOUT_S) -> Ack:
    """Send a signed request as an update and return the session's verdict; a refusal raises
    InvestigationError with the session's reason, and no worker answering raises ``Unanswered``."""
    name = Message(name)
    await genuine(client, session_id)
    return await _update_signed(client, session_id, name, speaker.sign(name, session_id, request), timeout_s)


async def _update_signed(client: Client, session_id: str, name: Message, signed: BaseModel, timeout_s: float) -> Ack:
    try:
        return await asyncio.wait_for(handle(client, session_id).execute_update(name, signed, result_type=Ack),
                                      timeout_s)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = getattr(cause, "message", None) or str(cause or exc)
        raise InvestigationError(message, getattr(cause, "type", None)) from None
    except (asyncio.TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        raise Unanswered(f"no worker answered within {timeout_s:.0f} s; start one (`bamboo dev up` or "
                         "`bamboo worker`)") from None
    except RPCError as exc:
        raise Unanswered(f"cannot reach session {session_id}: {exc.message}") from None


class Delivery(BaseModel):
    """How a request reached the session: judged now (``ack``, through an update) or kept by the server as a
    signal for the session to judge when a worker runs (``durable``; the verdict shows in the transcript).
    A decision's delivery names the turn and full hash it answered."""

    name: Message
    durable: bool = False
    ack: Ack | None = None
    turn: int | None = None
    code_hash: str | None = None
    kind: DecisionKind | None = None
    nonce: str | None = Field(default=None, description="the signature's nonce (None unsigned): names the request's "
                                                        "own entries in the transcript")

    @property
    def detail(self) -> str:
        return DURABLE_DETAIL if self.durable else (self.ack.detail if self.ack else "accepted")


async def deliver(client: Client, session_id: str, name: Message, request: BaseModel, speaker: Speaker, *,
                  worker_up: bool = True, timeout_s: float = UPDATE_TIMEOUT_S, first_run: str | None = None) -> Delivery:
    """Sign ``request`` once and deliver it: as an update while a worker answers (the verdict comes back, a
    refusal raises InvestigationError), else as a signal with the same signature, which the server keeps and
    the session judges through the same admission when a worker runs (a copy the update may have left behind
    is refused there as a replay: one signature, one effect). ``worker_up=False`` skips the update; with
    ``first_run`` (``genuine``) it goes only to the chain a front end showed."""
    await genuine(client, session_id, first_run)
    signed = speaker.sign(name, session_id, request)
    auth = getattr(signed, "auth", None)
    delivery = Delivery(name=name, nonce=auth.nonce if auth is not None else None)
    if isinstance(request, OperatorDecision):
        delivery = delivery.model_copy(update={"turn": request.turn, "code_hash": request.code_hash,
                                               "kind": request.kind})
    if worker_up:
        try:
            ack = await _update_signed(client, session_id, name, signed, timeout_s)
            return delivery.model_copy(update={"ack": ack})
        except Unanswered:
            pass
    try:
        await handle(client, session_id).signal(name, signed)
    except RPCError as exc:
        raise InvestigationError(f"cannot reach session {session_id}: {exc.message}") from None
    return delivery.model_copy(update={"durable": True})


async def deliver_decision(client: Client, session_id: str, decision: OperatorDecision, speaker: Speaker, *,
                           worker_up: bool = True, timeout_s: float = UPDATE_TIMEOUT_S,
                           first_run: str | None = None) -> Delivery:
    return await deliver(client, session_id, Message.DECIDE, decision, speaker, worker_up=worker_up,
                         timeout_s=timeout_s, first_run=first_run)


async def send_message(client: Client, session_id: str, text: str, speaker: Speaker, force_tool: bool = False,
                       fresh_code: bool = False, codify: str | None = None) -> None:
    """``fresh_code`` asks for newly written code instead of a stored procedure that fits; ``codify`` turns a
    written procedure into code ("" lists those that fit)."""
    await signal(client, session_id, Message.MESSAGE,
                 OperatorMessage(text=text, author=speaker.identity, force_tool=force_tool, fresh_code=fresh_code,
                                 codify=codify),
                 speaker)


async def send_decision(client: Client, session_id: str, decision: OperatorDecision, speaker: Speaker | None = None) -> None:
    """Send ``decision`` as a signal, signed by ``speaker`` when given (else exactly as it is)."""
    await genuine(client, session_id)
    request = speaker.sign(Message.DECIDE, session_id, decision) if speaker else decision
    await handle(client, session_id).signal(Message.DECIDE, request)


def checked_prefix(hash_prefix: str, what: str = "code hash") -> str:
    """``hash_prefix`` lower-cased, when it has at least MIN_HASH_PREFIX hex characters; else InvestigationError."""
    typed = hash_prefix.strip().lower()
    if len(typed) < MIN_HASH_PREFIX or typed.strip("0123456789abcdef"):
        raise InvestigationError(
            f"give at least {MIN_HASH_PREFIX} hex characters of the {what}, not {hash_prefix!r} (`bamboo approvals` "
            "prints it whole): a shorter prefix could match another made to share it")
    return typed


def matched_review(found: PendingView | PendingMemo, session_id: str, typed: str) -> None:
    """Raise InvestigationError unless ``typed`` (a checked prefix) starts the key of the review ``found``."""
    if found.review and found.review.startswith(typed):
        return
    if found.code_hash.startswith(typed):
        raise InvestigationError(
            f"{typed[:12]}… is the pending code's hash, not its review key: give the review key (`bamboo approvals` "
            "prints it under 'review'); the same code can be reviewed again with other procedures or tools behind it")
    raise InvestigationError(
        f"the review pending in {session_id} has key {found.review[:12] or '(none)'}, not {typed[:12]}…: it was "
        f"reviewed again or moved on since; read it again (`bamboo investigate --attach {session_id}`)")


async def decide_by_review(client: Client, session_id: str, review_key: str, kind: DecisionKind, speaker: Speaker,
                           replacement_code: str | None = None, *,
                           query_timeout_s: float = QUERY_TIMEOUT_S,
                           update_timeout_s: float = UPDATE_TIMEOUT_S) -> Delivery:
    """Answer the pending review whose key (``PendingView.review``, which covers the code hash) starts with
    ``review_key``, naming its turn, full code hash and review (what the signature covers). The session
    re-checks everything; a refusal raises InvestigationError. When no worker answers, these come from the
    session's memo and the decision goes as a signal (``Delivery``).

    The key names the review, not only the code: an edit and its undo bring the same code back in the same
    turn, reviewed again against procedure rows its requester may have rewritten; looked up by code hash, the
    answer signed that second review, never shown to the approver. It is at least MIN_HASH_PREFIX hex
    characters: whoever may edit the pending code could otherwise prepare two reviews sharing a short prefix
    and swap the one the approver read for the other before the approval is sent."""
    typed = checked_prefix(review_key, "review key")
    found, worker_up = await _pending_anywhere(client, session_id, query_timeout_s)
    if found is None:
        raise InvestigationError(f"session {session_id} has nothing waiting for approval")
    matched_review(found, session_id, typed)
    decision = OperatorDecision(turn=found.turn, code_hash=found.code_hash, kind=kind, approver=speaker.identity,
                                replacement_code=replacement_code, grants=grants_answered(found, kind),
                                review=found.review)
    return await deliver_decision(client, session_id, decision, speaker, worker_up=worker_up,
                                  timeout_s=update_timeout_s)


def grants_answered(review: PendingView | PendingMemo | None, kind: DecisionKind) -> tuple[str, ...]:
    """The durable grants an answer of ``kind`` to ``review`` names: those the review offers, for auto-run."""
    return tuple(review.grants) if review is not None and kind is DecisionKind.AUTO_RUN else ()


async def pending_review_of(client: Client, session_id: str, turn: int, code_hash: str,
                            query_timeout_s: float = QUERY_TIMEOUT_S,
                            first_run: str | None = None) -> PendingView | PendingMemo | None:
    """The review of (turn, code_hash) waiting now, read from the session (its memo when no worker answers);
    None when that review no longer waits (an answer to it is then refused as stale)."""
    found, _ = await _pending_anywhere(client, session_id, query_timeout_s, first_run)
    if found is None or found.turn != turn or found.code_hash != code_hash:
        return None
    return found


async def _pending_anywhere(client: Client, session_id: str, query_timeout_s: float,
                            first_run: str | None = None) -> tuple[PendingView | PendingMemo | None, bool]:
    """The pending review from the session, or from its memo when no worker answers; and whether one answered."""
    try:
        return await pending(client, session_id, query_timeout_s, first_run), True
    except Unanswered:
        return await pending_memo(client, session_id, first_run), False


async def revoke(client: Client, session_id: str, target: str, speaker: Speaker) -> None:
    await signal(client, session_id, Message.REVOKE, RevokeRequest(target=target, actor=speaker.identity), speaker)


async def finalize(client: Client, session_id: str, cause: str, resolution: str, speaker: Speaker) -> None:
    request = FinalizeRequest(cause=cause, resolution=resolution, actor=speaker.identity)
    await signal(client, session_id, Message.FINALIZE, request, speaker)


async def abandon(client: Client, session_id: str, speaker: Speaker, reason: str = "") -> None:
    await signal(client, session_id, Message.ABANDON, AbandonRequest(actor=speaker.identity, reason=reason), speaker)


class PendingApproval(BaseModel):
    session_id: str
    view: PendingView


async def list_pending(client: Client, limit: int = 100, unanswered: list[str] | None = None,
                       timeout_s: float | None = None) -> list[PendingApproval]:
    """Pending reviews across sessions: the search attribute finds candidates among investigations on our queue
    (``pending_query``), the query confirms each (``pending``, which checks the chain's first run too). A session
    whose query no worker answers is added to ``unanswered`` when given (it may well be waiting)."""
    found: list[PendingApproval] = []
    async for execution in client.list_workflows(pending_query(), limit=limit):
        session = session_of(execution.id)
        try:
            view = await pending(client, session, timeout_s)
        except NotASession:
            continue  # someone else's workflow under a session's id: nothing of it is shown
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



class SessionSummary(BaseModel):
    """One session as the server lists it (no worker needed): its run's status and whether a review waits."""

    session_id: str
    status: str
    started: datetime
    task_id: int | None = None
    awaiting: bool = False


class InvestigationClient:
    """The operator API of investigations, bound to one Temporal client: what the CLI, the console and the bot
    call (docs/adding-a-front-end.md). Each request names its ``Speaker`` (a front end speaks for many people
    with its own key). Requests are delivered durably: while no worker answers, as a signed signal the session
    judges when one runs (``Delivery.durable``), so an approval sent during a restart is not turned away."""

    def __init__(self, client: Client, *, query_timeout_s: float = QUERY_TIMEOUT_S,
                 update_timeout_s: float = UPDATE_TIMEOUT_S) -> None:
        self.client = client
        self.query_timeout_s = query_timeout_s
        self.update_timeout_s = update_timeout_s

    # ---------------------------------------------------------------- sessions
    async def start(self, inp: InvestigationStart, *, attach: bool = True) -> str:
        """Start the session (or attach to it when it already runs, unless ``attach`` is False); returns its id."""
        await start(self.client, inp, attach=attach)
        return inp.session_id

    async def execution_status(self, session_id: str, *, first_run: str | None = None) -> str | None:
        """Temporal's word for the session's run ("running", "completed", …); None when there is no such session,
        NotASession when the workflow under its id is not one (``genuine``; with ``first_run``, not the chain
        shown). Answered by the server, without a worker."""
        try:
            desc = await handle(self.client, session_id).describe()
        except RPCError:
            return None
        await _check_chain(self.client, session_id, desc, first_run)
        return desc.status.name.lower() if desc.status else "unknown"

    async def first_run(self, session_id: str) -> str:
        """The first run of the session's chain (``first_run_of``), once ``genuine``: what a front end records when
        it opens a session, and passes as ``first_run`` to every later read and request."""
        return first_run_of(await genuine(self.client, session_id))

    async def sessions(self, limit: int = 100) -> list[SessionSummary]:
        """Investigations on our queue (``sessions_query``); a chain continued from a run that was not one is left
        out (``genuine``'s first-run check, once per chain)."""
        rows = []
        async for execution in self.client.list_workflows(sessions_query(), limit=limit):
            first = execution.raw_info.first_run_id
            if first and first != execution.run_id:
                try:
                    await _check_first_run(self.client, session_of(execution.id), first)
                except InvestigationError:
                    continue
            attrs = execution.typed_search_attributes
            rows.append(SessionSummary(
                session_id=session_of(execution.id),
                status=execution.status.name.lower() if execution.status else "unknown",
                started=execution.start_time, task_id=attrs.get(TASK_ID), awaiting=bool(attrs.get(AWAITING_APPROVAL)),
            ))
        return rows

    async def result(self, session_id: str) -> InvestigationResult:
        return await handle(self.client, session_id).result()

    # ---------------------------------------------------------------- reading
    async def pending(self, session_id: str, *, first_run: str | None = None) -> PendingView | None:
        return await pending(self.client, session_id, self.query_timeout_s, first_run)

    async def pending_memo(self, session_id: str, *, first_run: str | None = None) -> PendingMemo | None:
        return await pending_memo(self.client, session_id, first_run)

    async def list_pending(self, limit: int = 100, unanswered: list[str] | None = None) -> list[PendingApproval]:
        return await list_pending(self.client, limit, unanswered, self.query_timeout_s)

    async def transcript(self, session_id: str, since: int = 0, *, first_run: str | None = None) -> list[TranscriptEntry]:
        """The session's record from ``since``; NotASession for a workflow that is not one (nothing of it is shown)."""
        return await transcript(self.client, session_id, since, timeout_s=self.query_timeout_s, first_run=first_run)

    async def approvals(self, session_id: str, *, first_run: str | None = None) -> ApprovalsView:
        return await approvals(self.client, session_id, timeout_s=self.query_timeout_s, first_run=first_run)

    # ---------------------------------------------------------------- requests
    async def message(self, session_id: str, speaker: Speaker, text: str, *, force_tool: bool = False,
                      fresh_code: bool = False, codify: str | None = None, first_run: str | None = None) -> Delivery:
        request = OperatorMessage(text=text, author=speaker.identity, force_tool=force_tool, fresh_code=fresh_code,
                                  codify=codify)
        return await self._deliver(session_id, Message.MESSAGE, request, speaker, first_run)

    async def decide(self, session_id: str, speaker: Speaker, turn: int, code_hash: str, kind: DecisionKind,
                     replacement_code: str | None = None, grants: Sequence[str] | None = None,
                     review: str | None = None, *, first_run: str | None = None) -> Delivery:
        """Answer exactly the review a person saw: its turn, full hash and ``review`` (the view's digest, as
        shown); one that moved on, or was reviewed again since, is refused. An auto-run answer names the durable
        grants the review offers (``grants``, as shown). A front end passes both as it showed them; left out,
        they are read again from what waits now under (turn, code_hash)."""
        if review is None or (kind is DecisionKind.AUTO_RUN and grants is None):
            found = await pending_review_of(self.client, session_id, turn, code_hash, self.query_timeout_s, first_run)
            if review is None:
                review = found.review if found is not None else ""
            if grants is None:
                grants = grants_answered(found, kind)
        decision = OperatorDecision(turn=turn, code_hash=code_hash, kind=kind, approver=speaker.identity,
                                    replacement_code=replacement_code,
                                    grants=tuple(grants or ()) if kind is DecisionKind.AUTO_RUN else (), review=review)
        return await self._deliver(session_id, Message.DECIDE, decision, speaker, first_run)

    async def decide_by_review(self, session_id: str, speaker: Speaker, review_key: str, kind: DecisionKind,
                               replacement_code: str | None = None) -> Delivery:
        return await decide_by_review(self.client, session_id, review_key, kind, speaker, replacement_code,
                                      query_timeout_s=self.query_timeout_s, update_timeout_s=self.update_timeout_s)

    async def revoke(self, session_id: str, speaker: Speaker, target: str, *, first_run: str | None = None) -> Delivery:
        return await self._deliver(session_id, Message.REVOKE, RevokeRequest(target=target, actor=speaker.identity),
                                   speaker, first_run)

    async def finalize(self, session_id: str, speaker: Speaker, cause: str, resolution: str) -> Delivery:
        request = FinalizeRequest(cause=cause, resolution=resolution, actor=speaker.identity)
        return await self._deliver(session_id, Message.FINALIZE, request, speaker)

    async def abandon(self, session_id: str, speaker: Speaker, reason: str = "") -> Delivery:
        return await self._deliver(session_id, Message.ABANDON, AbandonRequest(actor=speaker.identity, reason=reason),
                                   speaker)

    async def _deliver(self, session_id: str, name: Message, request: BaseModel, speaker: Speaker,
                       first_run: str | None = None) -> Delivery:
        return await deliver(self.client, session_id, name, request, speaker, timeout_s=self.update_timeout_s,
                             first_run=first_run)
