"""Everything the console does to Temporal and the store, behind one small interface.

Pages never talk to Temporal or Postgres themselves: they call this backend, which speaks to sessions only
through ``bamboo.investigation.client`` and signs every request with the console's key
(``Speaker(user, console_key)``), naming the signed-in person as the identity. The session's workflow checks
that signature against the deployment's registry: the console key must hold the ``front_end`` role and the
person must be registered with the role the request needs. Nothing here decides who may do what.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

from bamboo.analysis.contract import BatchAnalyzeProgress
from bamboo.approvals.keys import LocalKey
from bamboo.contract import AWAITING_APPROVAL, KIND, TASK_ID, Kind
from bamboo.approvals.admin import PinnedAdmins
from bamboo.approvals.registry import ApproverRegistry
from bamboo.audit import AuditEvent
from bamboo.investigation import client as inv
from bamboo.accumulation.contract import PopulateProgress
from bamboo.investigation.contract import Ack, ApprovalsView, OperatorMessage, PendingView, RevokeRequest, TranscriptEntry
from bamboo.settings import Settings
from bamboo.store import Store
from bamboo.store.audit_log import ChainReport
from policy.approvers import Role
from policy.decisions import DecisionKind, OperatorDecision

BATCH_KINDS = {Kind.POPULATE.value: "populate", Kind.ANALYZE_BATCH.value: "analyze"}
BATCH_SIGNALS = ("pause", "resume", "cancel")
# A batch whose worker is gone must not hold the page: its row says so after this long.
PROGRESS_QUERY_TIMEOUT = timedelta(seconds=5)
SESSIONS_QUERY = "BambooKind = 'investigate'"
BATCHES_QUERY = f"{KIND.name} = '{Kind.POPULATE}' OR {KIND.name} = '{Kind.ANALYZE_BATCH}'"


class ConsoleError(RuntimeError):
    """A request the console could not carry out; ``refusal`` is the session's reason code when it refused."""

    def __init__(self, message: str, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class SessionRow(BaseModel):
    session_id: str
    status: str
    started: datetime
    task_id: int | None = None
    awaiting: bool = False


class BatchRow(BaseModel):
    workflow_id: str
    kind: str
    status: str
    started: datetime
    progress: PopulateProgress | BatchAnalyzeProgress | None = None
    detail: str = ""


class GrantRow(BaseModel):
    session_id: str
    kind: str
    key: str
    what: str
    by: str
    since: str = ""


class AuditState(BaseModel):
    chain: ChainReport
    recent: list[dict] = Field(default_factory=list)


class ConsoleBackend:
    def __init__(self, client: Client, store: Store, settings: Settings, key: LocalKey) -> None:
        self.client = client
        self.store = store
        self.settings = settings
        self.key = key
        self.registry = ApproverRegistry(store.pool, store.audit, PinnedAdmins.of(settings))

    def speaker(self, identity: str) -> inv.Speaker:
        """The signed-in person, spoken for by the console's key."""
        return inv.Speaker(identity, self.key)

    # ------------------------------------------------------------------ reviews
    async def pending(self) -> list[inv.PendingApproval]:
        return await inv.list_pending(self.client)

    async def review(self, session_id: str) -> PendingView | None:
        try:
            return await inv.pending(self.client, session_id)
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc)) from None

    async def decide(self, identity: str, session_id: str, turn: int, code_hash: str, kind: DecisionKind,
                     replacement_code: str | None = None) -> Ack:
        """Send exactly the turn and hash the page showed: a page that is out of date is refused by the session."""
        try:
            decision = OperatorDecision(turn=turn, code_hash=code_hash, kind=kind, approver=identity,
                                        replacement_code=replacement_code)
        except ValidationError as exc:
            raise ConsoleError(f"the decision is not valid: {exc.errors()[0]['msg']}; reload the review and try again",
                               "malformed") from None
        return await self._update(session_id, "decide", decision, identity)

    # ------------------------------------------------------------------ sessions
    async def sessions(self, limit: int = 100) -> list[SessionRow]:
        rows = []
        async for execution in self.client.list_workflows(SESSIONS_QUERY, limit=limit):
            attrs = execution.typed_search_attributes
            rows.append(SessionRow(
                session_id=inv.session_of(execution.id),
                status=execution.status.name.lower() if execution.status else "unknown",
                started=execution.start_time, task_id=attrs.get(TASK_ID), awaiting=bool(attrs.get(AWAITING_APPROVAL)),
            ))
        return rows

    async def session_status(self, session_id: str) -> str:
        try:
            desc = await inv.handle(self.client, session_id).describe()
        except RPCError as exc:
            raise ConsoleError(f"no session {session_id}: {exc.message}") from None
        return desc.status.name.lower() if desc.status else "unknown"

    async def transcript(self, session_id: str) -> list[TranscriptEntry]:
        try:
            return await inv.transcript(self.client, session_id)
        except RPCError as exc:
            raise ConsoleError(f"cannot read session {session_id}: {exc.message}") from None

    async def approvals(self, session_id: str) -> ApprovalsView:
        try:
            return await inv.approvals(self.client, session_id)
        except RPCError as exc:
            raise ConsoleError(f"cannot read session {session_id}: {exc.message}") from None

    async def grants(self) -> list[GrantRow]:
        """Standing permissions of every running session: session policies and durable procedure grants."""
        rows = []
        for session in await self.sessions():
            if session.status != "running":
                continue
            try:
                view = await self.approvals(session.session_id)
            except ConsoleError:
                continue
            for hash_, policy in sorted(view.session_policies.items()):
                rows.append(GrantRow(session_id=session.session_id, kind="session", key=hash_,
                                     what=policy.policy.value, by=policy.approved_by))
            for name, grant in sorted(view.grants.items()):
                rows.append(GrantRow(session_id=session.session_id, kind="durable", key=name,
                                     what=f"auto-run of {name} at {grant.code_hash}", by=grant.granted_by,
                                     since=grant.granted_at.isoformat()))
        return rows

    async def start(self, identity: str, session_id: str, task_id: int | None, symptom: str | None,
                    startup_hypothesis: bool = True) -> str:
        await inv.start(self.client, inv.start_input(self.settings, session_id, identity, task_id=task_id,
                                                     symptom=symptom, startup_hypothesis=startup_hypothesis))
        return session_id

    async def ask(self, identity: str, session_id: str, text: str, force_tool: bool) -> Ack:
        try:
            message = OperatorMessage(text=text, author=identity, force_tool=force_tool)
        except ValidationError as exc:
            raise ConsoleError(f"the message is not valid: {exc.errors()[0]['msg']}", "malformed") from None
        return await self._update(session_id, "message", message, identity)

    async def revoke(self, identity: str, session_id: str, target: str) -> Ack:
        try:
            request = RevokeRequest(target=target, actor=identity)
        except ValidationError as exc:
            raise ConsoleError(f"the revoke target is not valid: {exc.errors()[0]['msg']}", "malformed") from None
        return await self._update(session_id, "revoke", request, identity)

    async def _update(self, session_id: str, name: str, request: BaseModel, identity: str) -> Ack:
        try:
            return await inv.update(self.client, session_id, name, request, self.speaker(identity))
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc), exc.refusal) from None

    # ------------------------------------------------------------------ batches
    async def batches(self, limit: int = 50) -> list[BatchRow]:
        rows = []
        async for execution in self.client.list_workflows(BATCHES_QUERY, limit=limit):
            kind = BATCH_KINDS.get(execution.typed_search_attributes.get(KIND) or "", "populate")
            status = execution.status.name.lower() if execution.status else "unknown"
            row = BatchRow(workflow_id=execution.id, kind=kind, status=status, started=execution.start_time)
            if status == "running":
                progress_type = PopulateProgress if kind == "populate" else BatchAnalyzeProgress
                try:
                    row.progress = await self.client.get_workflow_handle(execution.id).query(
                        "progress", result_type=progress_type, rpc_timeout=PROGRESS_QUERY_TIMEOUT)
                except RPCError as exc:
                    row.detail = f"progress unavailable: {exc.message}"
                except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
                    # The batch is finishing, its workflow task is failing, or it is of another shape:
                    # its row says so and the other batches are still listed.
                    row.detail = f"progress unavailable: {exc}"
                except (TypeError, ValueError) as exc:  # the answer does not decode as this version's progress
                    row.detail = f"progress unavailable: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            rows.append(row)
        return rows

    async def control_batch(self, identity: str, workflow_id: str, action: str) -> None:
        """Pause, resume or cancel a batch; only workflows that are batches can be signalled from here."""
        if action not in BATCH_SIGNALS:
            raise ConsoleError(f"unknown batch action {action!r}; use one of {', '.join(BATCH_SIGNALS)}")
        handle = self.client.get_workflow_handle(workflow_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise ConsoleError(f"no batch {workflow_id}: {exc.message}") from None
        if desc.typed_search_attributes.get(KIND) not in BATCH_KINDS:
            raise ConsoleError(f"{workflow_id} is not a populate or analyze batch")
        if desc.status is None or desc.status.name != "RUNNING":
            raise ConsoleError(f"batch {workflow_id} is not running; it cannot be told to {action}")
        try:
            await handle.signal(action)
        except RPCError as exc:  # it finished between the look and the signal
            raise ConsoleError(f"batch {workflow_id} did not take the {action}: {exc.message}") from None
        await self.store.audit.append(AuditEvent(kind="batch_control", actor=identity,
                                                 body={"workflow_id": workflow_id, "signal": action, "via": "console"}))

    # ------------------------------------------------------------------ audit and registry
    async def audit_state(self, recent: int = 20) -> AuditState:
        return AuditState(chain=await self.store.audit.verify(), recent=await self.store.audit.tail(recent))

    async def roles(self, identity: str) -> list[Role] | None:
        """The person's roles in the registry, or None when they are not registered (shown, never enforced here)."""
        entry = next((e for e in await self.registry.active() if e.identity == identity), None)
        return sorted(entry.roles, key=lambda r: r.value) if entry else None

    async def account_identity(self, account: str) -> str | None:
        """Whom a local account signs in as: only what a pinned administrator bound it to, never the account
        file's say (whoever can write that file is not thereby an administrator)."""
        return await self.registry.account_identity(self.key.identity, account)

    async def front_end_registered(self) -> bool:
        entry = next((e for e in await self.registry.active() if e.identity == self.key.identity), None)
        return entry is not None and entry.public_key == self.key.public_key and Role.FRONT_END in entry.roles
