"""What remote executors must remember across processes: accepted nonces and capability grants.

A nonce is recorded with a plain INSERT on its primary key, so two executors handed the same envelope (a
replay, or a Temporal retry) cannot both accept it: one insert wins, the other sees the conflict. Rows are
never deleted here; a nonce outlives the expiry of the envelope that carried it.

Grant capacity is consumed under ``SELECT ... FOR UPDATE`` on the grant's row: the capacity is re-judged with
``policy.capabilities`` inside the lock, the counter incremented and the use recorded in one transaction, so
the last execution of a grant is spent exactly once however many executors race for it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime, timezone

from psycopg_pool import AsyncConnectionPool

from policy.capabilities import CapabilityGrant, capacity_refusal
from policy.envelopes import EnvelopeClaims

_GRANT_COLUMNS = ("grant_id, environment, tool, rule, targets, max_executions, max_repetitions, executions_used, "
                  "expires_at, granted_by, revoked_at")


def _grant(row: tuple) -> CapabilityGrant:
    gid, env, tool, rule, targets, max_exec, max_rep, used, expires, by, revoked = row
    return CapabilityGrant(grant_id=gid, environment=env, tool=tool, rule=rule, targets=tuple(targets),
                           max_executions=max_exec, max_repetitions=max_rep, executions_used=used,
                           expires_at=expires, granted_by=by, revoked=revoked is not None)


class GrantExhausted(RuntimeError):
    """The grant lost its capacity between judging and consuming (another executor used it)."""


class ExecutorState:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    # --- nonces -----------------------------------------------------------------------------------------

    async def record_nonces(self, claims: EnvelopeClaims, nonces: Iterable[tuple[str, str]]) -> str | None:
        """Record each ``(kind, nonce)`` of this envelope in one transaction. Returns the kind of the first
        nonce already recorded (and records none of them), or None when all were new and are now recorded."""
        try:
            async with self._pool.connection() as conn:
                async with conn.transaction():
                    for kind, nonce in nonces:
                        row = await (await conn.execute(
                            "INSERT INTO executor_nonces (nonce, kind, key_id, run_id, tool_call_id, environment, "
                            "channel, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                            "ON CONFLICT (nonce) DO NOTHING RETURNING 1",
                            (nonce, kind, claims.key_id, claims.run_id, claims.tool_call_id, claims.environment,
                             claims.channel, claims.expires_at),
                        )).fetchone()
                        if row is None:
                            raise _Seen(kind)  # leaving the transaction by an exception rolls it back
        except _Seen as seen:
            return seen.kind
        return None

    async def seen(self, nonces: Iterable[str]) -> set[str]:
        wanted = list(nonces)
        async with self._pool.connection() as conn:
            rows = await (await conn.execute("SELECT nonce FROM executor_nonces WHERE nonce = ANY(%s)",
                                             (wanted,))).fetchall()
        return {r[0] for r in rows}

    # --- grants -----------------------------------------------------------------------------------------

    async def create_grant(self, *, environment: str, tool: str, rule: str, targets: list[str], max_executions: int,
                           max_repetitions: int, expires_at: datetime, granted_by: str) -> CapabilityGrant:
        grant = CapabilityGrant(grant_id=secrets.token_hex(8), environment=environment, tool=tool, rule=rule,
                                targets=tuple(targets), max_executions=max_executions,
                                max_repetitions=max_repetitions, expires_at=expires_at, granted_by=granted_by)
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO capability_grants (grant_id, environment, tool, rule, targets, max_executions, "
                "max_repetitions, expires_at, granted_by) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (grant.grant_id, environment, tool, rule, list(grant.targets), max_executions, max_repetitions,
                 grant.expires_at, grant.granted_by),
            )
        return grant

    async def revoke_grant(self, grant_id: str) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE capability_grants SET revoked_at = now() WHERE grant_id = %s AND revoked_at IS NULL",
                (grant_id,))
            return cur.rowcount > 0

    async def grants_for(self, *, environment: str, tool: str, rule: str,
                         argv_digest: str) -> tuple[list[CapabilityGrant], dict[str, int]]:
        """The unrevoked grants for this environment, tool and rule, and how often this argv ran under each."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM capability_grants WHERE environment = %s AND tool = %s AND rule = %s "
                "AND revoked_at IS NULL ORDER BY expires_at", (environment, tool, rule))).fetchall()
            uses = await (await conn.execute(
                "SELECT u.grant_id, count(*) FROM capability_grant_uses u JOIN capability_grants g USING (grant_id) "
                "WHERE g.environment = %s AND g.tool = %s AND g.rule = %s AND u.argv_digest = %s GROUP BY u.grant_id",
                (environment, tool, rule, argv_digest))).fetchall()
        return [_grant(r) for r in rows], {gid: n for gid, n in uses}

    async def consume(self, grant_id: str, claims: EnvelopeClaims) -> CapabilityGrant:
        """Spend one execution of ``grant_id`` for this envelope, or GrantExhausted saying why not."""
        async with self._pool.connection() as conn:
            async with conn.transaction():
                row = await (await conn.execute(
                    f"SELECT {_GRANT_COLUMNS} FROM capability_grants WHERE grant_id = %s FOR UPDATE",
                    (grant_id,))).fetchone()
                if row is None:
                    raise GrantExhausted(f"grant {grant_id} no longer exists")
                grant = _grant(row)
                if grant.revoked:
                    raise GrantExhausted(f"grant {grant_id} was revoked")
                repetitions = (await (await conn.execute(
                    "SELECT count(*) FROM capability_grant_uses WHERE grant_id = %s AND argv_digest = %s",
                    (grant_id, claims.argv_digest))).fetchone())[0]
                reason = capacity_refusal(grant, now=datetime.now(timezone.utc), repetitions_of_argv=repetitions)
                if reason is not None:
                    raise GrantExhausted(reason)
                await conn.execute(
                    "UPDATE capability_grants SET executions_used = executions_used + 1 WHERE grant_id = %s",
                    (grant_id,))
                await conn.execute(
                    "INSERT INTO capability_grant_uses (grant_id, argv_digest, nonce, run_id, tool_call_id) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (grant_id, claims.argv_digest, claims.nonce, claims.run_id, claims.tool_call_id))
        return grant.model_copy(update={"executions_used": grant.executions_used + 1})

    async def grant(self, grant_id: str) -> CapabilityGrant | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM capability_grants WHERE grant_id = %s", (grant_id,))).fetchone()
        return _grant(row) if row else None


class _Seen(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
