"""The deployment's approver registry and the approval policies it has judged with, in Postgres.

Whoever can write this table is the deployment (it needs the database credentials, which a requester's
client does not have). Every change is audited; every distinct policy version (rules + keys) the worker
hands to a workflow is recorded once, with an audit row, so "which rules judged this decision" can always be
answered from the version a decision's audit row carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from bamboo.audit import AuditEvent
from bamboo.store.audit_log import PostgresAuditLog
from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.identity import canonical_identity


class RegistryEntry(BaseModel):
    identity: str
    public_key: str
    key_id: str
    roles: list[Role]
    registered_by: str
    registered_at: str
    revoked_at: str | None = None


class ApproverRegistry:
    def __init__(self, pool: AsyncConnectionPool, audit: PostgresAuditLog) -> None:
        self._pool = pool
        self._audit = audit

    async def active(self) -> tuple[RegisteredKey, ...]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT identity, public_key, roles FROM approvers WHERE revoked_at IS NULL ORDER BY identity"
            )).fetchall()
        return tuple(RegisteredKey(identity=i, public_key=k, roles=frozenset(Role(r) for r in roles))
                     for i, k, roles in rows)

    async def entries(self) -> list[RegistryEntry]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT identity, public_key, roles, registered_by, registered_at, revoked_at FROM approvers "
                "ORDER BY identity")).fetchall()
        return [RegistryEntry(identity=i, public_key=k, key_id=RegisteredKey(identity=i, public_key=k).key_id,
                              roles=[Role(r) for r in roles], registered_by=by, registered_at=at.isoformat(),
                              revoked_at=rev.isoformat() if rev else None)
                for i, k, roles, by, at, rev in rows]

    async def register(self, identity: str, public_key: str, roles: Iterable[Role], registered_by: str) -> RegisteredKey:
        """Add or replace the key and roles of ``identity`` (a revoked identity becomes active again)."""
        entry = RegisteredKey(identity=identity, public_key=public_key, roles=frozenset(roles))
        by = canonical_identity(registered_by)
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO approvers (identity, public_key, roles, registered_by) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (identity) DO UPDATE SET public_key = EXCLUDED.public_key, roles = EXCLUDED.roles, "
                "registered_by = EXCLUDED.registered_by, registered_at = now(), revoked_at = NULL",
                (entry.identity, entry.public_key, sorted(r.value for r in entry.roles), by),
            )
        await self._audit.append(AuditEvent(kind="approver_registered", actor=by, body={
            "identity": entry.identity, "key_id": entry.key_id, "roles": sorted(r.value for r in entry.roles)}))
        return entry

    async def ensure(self, identity: str, public_key: str, roles: Iterable[Role], registered_by: str) -> bool:
        """Register unless exactly this key and these roles are already active; True when it changed."""
        wanted = RegisteredKey(identity=identity, public_key=public_key, roles=frozenset(roles))
        if wanted in await self.active():
            return False
        await self.register(identity, public_key, roles, registered_by)
        return True

    async def revoke(self, identity: str, revoked_by: str) -> bool:
        identity, by = canonical_identity(identity), canonical_identity(revoked_by)
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE approvers SET revoked_at = now() WHERE identity = %s AND revoked_at IS NULL", (identity,))
            revoked = cur.rowcount > 0
        if revoked:
            await self._audit.append(AuditEvent(kind="approver_revoked", actor=by, body={"identity": identity}))
        return revoked

    async def policy(self, rules: ApprovalRules) -> DeploymentPolicy:
        """The current policy; a version seen for the first time is recorded and audited."""
        policy = DeploymentPolicy(rules=rules, approvers=await self.active())
        body = {"rules": rules.model_dump(mode="json"),
                "approvers": [{"identity": a.identity, "key_id": a.key_id, "roles": sorted(r.value for r in a.roles)}
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
