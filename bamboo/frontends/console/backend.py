"""Everything the console does to Temporal and the store, behind one small interface.

Pages never talk to Temporal or Postgres themselves: they call this backend, which speaks to sessions only
through ``bamboo.investigation.client.InvestigationClient`` and to batches only through
``bamboo.batch.client.BatchClient`` (docs/adding-a-front-end.md), and reads what an
operator types with the shared parser (``bamboo.frontends.operator_lines``). It signs every request with the
console's key
(``Speaker(user, console_key)``), naming the signed-in person as the identity. The session's workflow checks
that signature against the deployment's registry: the console key must hold the ``front_end`` role and the
person must be registered with the role the request needs. Nothing here decides who may do what.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client

from bamboo.batch.client import BatchClient, BatchError
from bamboo.batch.contract import BatchResult
from bamboo.analysis.contract import BatchAnalyzeProgress
from bamboo.approvals.keys import LocalKey
from bamboo.contract import Kind
from bamboo.approvals.admin import PinnedAdmins
from bamboo.approvals.registry import ApproverRegistry
from bamboo.audit import AuditEvent
from bamboo.investigation import client as inv
from bamboo.accumulation.contract import PopulateProgress
from bamboo.frontends.operator_lines import parse_line
from bamboo.investigation.contract import ApprovalsView, PendingView, TranscriptEntry
from bamboo.settings import Settings
from bamboo.store import Store
from bamboo.store.audit_log import ChainReport
from bamboo.store.knowledge_browse import PAGE_SIZE, CauseDetail, CausePage, KnowledgeBrowse
from policy.approvers import Role
from policy.decisions import DecisionKind

# How the page names each batch kind, and the progress model each answers with.
BATCH_KINDS = {Kind.POPULATE.value: "populate", Kind.ANALYZE_BATCH.value: "analyze"}
BATCH_PROGRESS = {Kind.POPULATE.value: PopulateProgress, Kind.ANALYZE_BATCH.value: BatchAnalyzeProgress}
# How many sessions the grants page asks at once (each query waits at most the client's query timeout).
GRANTS_CONCURRENCY = 8


class ConsoleError(RuntimeError):
    """A request the console could not carry out; ``refusal`` is the session's reason code when it refused."""

    def __init__(self, message: str, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


SessionRow = inv.SessionSummary


class BatchRow(BaseModel):
    workflow_id: str
    kind: str
    status: str
    started: datetime
    progress: PopulateProgress | BatchAnalyzeProgress | None = None
    result: BatchResult | None = Field(default=None, description="a completed batch's final counts")
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
        self.sessions_api = inv.InvestigationClient(client)
        self.batches_api = BatchClient(client, BATCH_PROGRESS)
        self.registry = ApproverRegistry(store.pool, store.audit, PinnedAdmins.of(settings))
        self.knowledge_api = KnowledgeBrowse(store.pool)

    def speaker(self, identity: str) -> inv.Speaker:
        """The signed-in person, spoken for by the console's key."""
        return inv.Speaker(identity, self.key, deployment=self.settings.resolved_deployment())

    # ------------------------------------------------------------------ reviews
    async def pending(self) -> list[inv.PendingApproval]:
        return await self.sessions_api.list_pending()

    async def review(self, session_id: str) -> PendingView | None:
        try:
            return await self.sessions_api.pending(session_id)
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc)) from None

    async def decide(self, identity: str, session_id: str, turn: int, code_hash: str, kind: DecisionKind,
                     replacement_code: str | None = None, *, review: str) -> inv.Delivery:
        """Send exactly the turn, hash and review the page showed: a page that is out of date (or whose code was
        reviewed again since) is refused by the session. While no worker runs, the decision is kept by the server
        and judged when one does (``Delivery``)."""
        try:
            return await self.sessions_api.decide(session_id, self.speaker(identity), turn, code_hash, kind,
                                                  replacement_code, review=review)
        except ValidationError as exc:
            raise ConsoleError(f"the decision is not valid: {exc.errors()[0]['msg']}; reload the review and try again",
                               "malformed") from None
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc), exc.refusal) from None

    # ------------------------------------------------------------------ sessions
    async def sessions(self, limit: int = 100) -> list[inv.SessionSummary]:
        return await self.sessions_api.sessions(limit)

    async def session_status(self, session_id: str) -> str:
        """The session's run status; ConsoleError when there is none, or the workflow under its id is not a session
        (``genuine``: then nothing of it is shown; the page reads this first)."""
        try:
            status = await self.sessions_api.execution_status(session_id)
        except inv.InvestigationError as exc:
            raise ConsoleError(f"cannot read session {session_id}: {exc}") from None
        if status is None:
            raise ConsoleError(f"no session {session_id}")
        return status

    async def transcript(self, session_id: str) -> list[TranscriptEntry]:
        try:
            return await self.sessions_api.transcript(session_id)
        except inv.InvestigationError as exc:
            raise ConsoleError(f"cannot read session {session_id}: {exc}") from None

    async def approvals(self, session_id: str) -> ApprovalsView:
        try:
            return await self.sessions_api.approvals(session_id)
        except inv.InvestigationError as exc:
            raise ConsoleError(f"cannot read session {session_id}: {exc}") from None

    async def grants(self) -> list[GrantRow]:
        """Standing permissions of every running session: session policies and durable procedure grants. The
        sessions are asked at most ``GRANTS_CONCURRENCY`` at a time, each for at most the client's query timeout:
        asked one after another with no bound, one workflow no worker answered held the page 30 s, and each more
        another 30 s. A session that does not answer, or is not one (``genuine``), is left out."""
        running = [s.session_id for s in await self.sessions() if s.status == "running"]
        bound = asyncio.Semaphore(GRANTS_CONCURRENCY)

        async def standing(session_id: str) -> ApprovalsView | None:
            async with bound:
                try:
                    return await self.approvals(session_id)
                except ConsoleError:
                    return None

        rows = []
        for session_id, view in zip(running, await asyncio.gather(*(standing(s) for s in running))):
            if view is None:
                continue
            for hash_, policy in sorted(view.session_policies.items()):
                rows.append(GrantRow(session_id=session_id, kind="session", key=hash_,
                                     what=policy.policy.value, by=policy.approved_by))
            for name, grant in sorted(view.grants.items()):
                rows.append(GrantRow(session_id=session_id, kind="durable", key=name,
                                     what=f"auto-run of {name} at {grant.code_hash}", by=grant.granted_by,
                                     since=grant.granted_at.isoformat()))
        return rows

    async def start(self, identity: str, session_id: str, task_id: int | None, symptom: str | None,
                    startup_hypothesis: bool = True) -> str:
        return await self.sessions_api.start(inv.start_input(
            self.settings, session_id, identity, task_id=task_id, symptom=symptom,
            startup_hypothesis=startup_hypothesis))

    async def ask(self, identity: str, session_id: str, text: str, force_tool: bool) -> inv.Delivery:
        """A line from the ask box, read as every front end reads it (``/new``, ``/codify``, ``/tool``)."""
        line = parse_line(text)
        if line.kind != "message":
            raise ConsoleError(line.error or "that command is a button on this page, not a message", "malformed")
        try:
            return await self.sessions_api.message(session_id, self.speaker(identity), line.text,
                                                   force_tool=force_tool or line.force_tool,
                                                   fresh_code=line.fresh_code, codify=line.codify)
        except ValidationError as exc:
            raise ConsoleError(f"the message is not valid: {exc.errors()[0]['msg']}", "malformed") from None
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc), exc.refusal) from None

    async def revoke(self, identity: str, session_id: str, target: str) -> inv.Delivery:
        try:
            return await self.sessions_api.revoke(session_id, self.speaker(identity), target)
        except ValidationError as exc:
            raise ConsoleError(f"the revoke target is not valid: {exc.errors()[0]['msg']}", "malformed") from None
        except inv.InvestigationError as exc:
            raise ConsoleError(str(exc), exc.refusal) from None

    # ------------------------------------------------------------------ batches
    async def batches(self, limit: int = 50) -> list[BatchRow]:
        """Every batch, each running one with its progress; a batch whose progress cannot be read says why in
        its row and the others are still listed (``BatchClient.batches``)."""
        return [BatchRow(workflow_id=b.workflow_id, kind=BATCH_KINDS.get(b.kind, "populate"), status=b.status,
                         started=b.started, progress=b.progress, result=b.result, detail=b.detail)
                for b in await self.batches_api.batches(limit)]

    async def control_batch(self, identity: str, workflow_id: str, action: str) -> None:
        """Pause, resume or cancel a batch; only workflows that are batches can be signalled from here, and only by
        a person registered to ask for work (role request). A batch signal is the console's own (no session judges
        it, as one judges a signed request), so the console checks the registry itself: anyone the sign-in lets in,
        registered or not, could otherwise cancel a production batch."""
        if Role.REQUEST not in (await self.roles(identity) or []):
            raise ConsoleError(f"{identity} is not registered to run work here (role request), so cannot pause, "
                               "resume or cancel batches; ask the deployment to register you", "approver_not_authorised")
        try:
            await self.batches_api.control(workflow_id, action)
        except BatchError as exc:
            raise ConsoleError(str(exc)) from None
        await self.store.audit.append(AuditEvent(kind="batch_control", actor=identity,
                                                 body={"workflow_id": workflow_id, "signal": action, "via": "console"}))

    # ------------------------------------------------------------------ knowledge
    async def knowledge(self, query: str = "", offset: int = 0, limit: int = PAGE_SIZE) -> CausePage:
        """One page of the known causes, most incidents first; bounded whatever the store holds."""
        return await self.knowledge_api.causes(query, offset, limit)

    async def cause(self, cause_id: int) -> CauseDetail | None:
        return await self.knowledge_api.cause(cause_id)

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
