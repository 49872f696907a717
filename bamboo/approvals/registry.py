"""The approver registry: administrators' signed statements in Postgres, folded into who may do what.

The table (``trust_statements``) is a log, never updated: registering, rotating, revoking, binding a console
account are each a new statement signed by a pinned administrator (``policy.trust_root``). Whoever reads the
registry checks every row against the pinned keys it read itself (reading the file and checking signatures run off
the event loop) (``bamboo.approvals.admin``), so a row
written by anyone else (the app role's password is on every worker and the embedded stack's requesters'
machines) counts for nothing and is listed as ignored. Every distinct policy version (rules + keys) the worker
hands to a workflow is recorded once, with an audit row, so "which rules judged this decision" can always be
answered from the version a decision's audit row carries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Protocol

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ValidationError

from bamboo.approvals.admin import sign_statement
from bamboo.approvals.keys import LocalKey
from bamboo.audit import AuditEvent
from bamboo.store.audit_log import PostgresAuditLog
from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.identity import canonical_identity
from policy.trust_root import (
    AccountBinding,
    Ignored,
    KeyRegistration,
    Registry,
    SignedStatement,
    StatementKind,
    TrustRoot,
    TrustRootError,
    binding_subject,
    fold_registry,
    verify,
)

# Statements kept by the registry; capability grants have their own table.
_REGISTRY_KINDS = [k.value for k in (StatementKind.REGISTER_KEY, StatementKind.REVOKE_KEY,
                                     StatementKind.BIND_ACCOUNT, StatementKind.UNBIND_ACCOUNT)]


class TrustRootSource(Protocol):
    def root(self) -> TrustRoot: ...


class RegistryEntry(BaseModel):
    identity: str
    key_id: str
    roles: list[Role]
    speaks_for: list[str]
    front_ends: list[str]


class ApproverRegistry:
    def __init__(self, pool: AsyncConnectionPool, audit: PostgresAuditLog, admins: TrustRootSource) -> None:
        self._pool = pool
        self._audit = audit
        self._admins = admins

    # ------------------------------------------------------------------ reading
    async def _rows(self) -> list[SignedStatement | Ignored]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT statement_id, kind, subject, statement, signature FROM trust_statements "
                "WHERE kind = ANY(%s) ORDER BY recorded_at, statement_id", (_REGISTRY_KINDS,))).fetchall()
        out: list[SignedStatement | Ignored] = []
        for statement_id, kind, subject, statement, signature in rows:
            try:
                signed = SignedStatement.model_validate({"statement": statement, "signature": signature})
            except ValidationError:
                out.append(Ignored(statement_id=str(statement_id)[:64], kind=str(kind)[:40], subject=str(subject)[:80],
                                   reason="not a trust statement"))
                continue
            if signed.statement.statement_id != statement_id or signed.statement.kind.value != kind \
                    or signed.statement.subject != subject:
                out.append(Ignored(statement_id=str(statement_id)[:64], kind=str(kind)[:40], subject=str(subject)[:80],
                                   reason="the row's columns do not match its signed statement"))
                continue
            out.append(signed)
        return out

    async def registry(self) -> Registry:
        """The registry as the pinned administrators signed it; checking signatures runs off the event loop."""
        rows = await self._rows()
        return await asyncio.to_thread(lambda: fold_registry(rows, self._admins.root()))

    async def active(self) -> tuple[RegisteredKey, ...]:
        return (await self.registry()).keys

    async def entries(self) -> list[RegistryEntry]:
        return [RegistryEntry(identity=k.identity, key_id=k.key_id, roles=sorted(k.roles, key=lambda r: r.value),
                              speaks_for=sorted(k.speaks_for), front_ends=sorted(k.front_ends))
                for k in await self.active()]

    async def account_identity(self, front_end: str, account: str) -> str | None:
        return (await self.registry()).account_identity(front_end, account)

    # ------------------------------------------------------------------ writing (statements only)
    async def _sign(self, admin: LocalKey, kind: StatementKind, subject: str,
                    body: BaseModel | None = None) -> SignedStatement:
        """``admin``'s statement for the deployment whose trust root this registry reads, dated after every
        statement about ``subject`` (issue times are whole seconds; two in one second would leave the fold to
        guess which is the latest, policy.trust_root.fold_registry)."""
        root = await asyncio.to_thread(self._admins.root)
        latest = max((s.statement.issued_at for s in (await self.registry()).history if s.statement.subject == subject),
                     default=None)
        now = datetime.now(timezone.utc).replace(microsecond=0)
        if latest is not None and now <= latest:
            now = latest + timedelta(seconds=1)
        return sign_statement(admin, kind, subject, body, deployment=root.deployment, now=now)

    async def append(self, signed: SignedStatement) -> None:
        """Store one signed statement; refused (TrustRootError) unless a pinned administrator signed it, so a
        statement nobody will honour is never written by this code."""
        reason = await asyncio.to_thread(lambda: verify(signed, self._admins.root()))
        if reason is not None:
            raise TrustRootError(f"refused to store a {signed.statement.kind.value} statement: {reason}")
        st = signed.statement
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO trust_statements (statement_id, kind, subject, statement, signature) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (statement_id) DO NOTHING",
                (st.statement_id, st.kind.value, st.subject, Jsonb(st.model_dump(mode="json")), signed.signature))
        await self._audit.append(AuditEvent(kind=f"trust_{st.kind.value}", actor=st.signer, body={
            "subject": st.subject, "statement_id": st.statement_id, "key_id": st.key_id, "body": st.body}),
            dedup_key=f"trust:{st.statement_id}")

    async def register(self, admin: LocalKey, identity: str, public_key: str, roles: Iterable[Role], *,
                       speaks_for: Iterable[str] = (), front_ends: Iterable[str] = ()) -> RegisteredKey:
        """A new registration statement (a rotation or a change of roles is one too; the old stays in history)."""
        who = canonical_identity(identity)
        body = KeyRegistration(public_key=public_key, roles=tuple(roles), speaks_for=tuple(speaks_for),
                               front_ends=tuple(front_ends))
        await self.append(await self._sign(admin, StatementKind.REGISTER_KEY, who, body))
        return RegisteredKey(identity=who, public_key=public_key, roles=frozenset(body.roles),
                             speaks_for=frozenset(body.speaks_for), front_ends=frozenset(body.front_ends))

    async def ensure(self, admin: LocalKey, identity: str, public_key: str, roles: Iterable[Role], *,
                     speaks_for: Iterable[str] = (), front_ends: Iterable[str] = ()) -> bool:
        """Register unless exactly this key, these roles and this scope are already in force; True when it
        signed a new statement. Bindings add to a front end's scope; they are not asked for here."""
        who = canonical_identity(identity)
        wanted = KeyRegistration(public_key=public_key, roles=tuple(roles), speaks_for=tuple(speaks_for),
                                 front_ends=tuple(front_ends))
        current = next((s for s in reversed((await self.registry()).history)
                        if s.statement.subject == who and s.statement.kind in (StatementKind.REGISTER_KEY,
                                                                                StatementKind.REVOKE_KEY)), None)
        if current is not None and current.statement.kind is StatementKind.REGISTER_KEY \
                and KeyRegistration.model_validate(current.statement.body) == wanted:
            return False
        await self.register(admin, who, public_key, wanted.roles, speaks_for=wanted.speaks_for,
                            front_ends=wanted.front_ends)
        return True

    async def revoke(self, admin: LocalKey, identity: str) -> bool:
        who = canonical_identity(identity)
        if all(k.identity != who for k in await self.active()):
            return False
        await self.append(await self._sign(admin, StatementKind.REVOKE_KEY, who))
        return True

    async def bind(self, admin: LocalKey, front_end: str, account: str, identity: str) -> AccountBinding:
        """Bind a front end's account to an identity: the front end signs in that account as that person and
        may speak for them. A rebinding is a new statement."""
        binding = AccountBinding(front_end=front_end, account=account, identity=identity)
        if (await self.registry()).account_identity(binding.front_end, binding.account) != binding.identity:
            await self.append(await self._sign(admin, StatementKind.BIND_ACCOUNT,
                                               binding_subject(binding.front_end, binding.account), binding))
        return binding

    async def unbind(self, admin: LocalKey, front_end: str, account: str) -> bool:
        fe = canonical_identity(front_end)
        if (await self.registry()).account_identity(fe, account) is None:
            return False
        await self.append(await self._sign(admin, StatementKind.UNBIND_ACCOUNT, binding_subject(fe, account)))
        return True

    # ------------------------------------------------------------------ the policy a workflow is handed
    async def policy(self, rules: ApprovalRules) -> DeploymentPolicy:
        """The current policy; a version seen for the first time is recorded and audited."""
        root = await asyncio.to_thread(self._admins.root)
        policy = DeploymentPolicy(rules=rules, approvers=await self.active(), deployment=root.deployment)
        body = {"rules": rules.model_dump(mode="json"),
                "admins": sorted(a.key_id for a in root.admins),
                "approvers": [{"identity": a.identity, "key_id": a.key_id, "roles": sorted(r.value for r in a.roles),
                               "speaks_for": sorted(a.speaks_for), "front_ends": sorted(a.front_ends)}
                              for a in policy.approvers]}
        async with self._pool.connection() as conn:
            new = await (await conn.execute(
                "INSERT INTO approval_policies (version, body) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (policy.version, json.dumps(body)),
            )).fetchone()
        if new:
            await self._audit.append(
                AuditEvent(kind="approval_policy_recorded", actor="worker", body={"version": policy.version, **body}),
                dedup_key=f"approval-policy:{policy.version}",
            )
        return policy
