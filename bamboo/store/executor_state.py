"""What remote executors must remember across processes: accepted nonces and capability grants.

A nonce is recorded with a plain INSERT on its primary key, so two executors handed the same envelope (a
replay, or a Temporal retry) cannot both accept it: one insert wins, the other sees the conflict. Rows are
never deleted here; a nonce outlives the expiry of the envelope that carried it.

A grant row carries an administrator's signed statement; every read checks it against the pinned keys the
caller passes (``policy.capabilities.signed_terms``) and against the row's own columns, and a row that fails
either counts for nothing (it is reported as ignored, with the reason). Grant rows, their uses and their
revocations are insert-only (migration 021): executions are counted from the uses, a revocation is a signed
statement of its own. One execution is spent under a transaction-level advisory lock on the grant (a row
lock would need UPDATE on an insert-only table): the capacity is re-judged inside the lock and the use
recorded in the same transaction, so the last execution of a grant is spent exactly once however many
executors race for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, ValidationError

from policy.capabilities import CapabilityGrant, GrantTerms, capacity_refusal, grant_of, revokes, signed_terms
from policy.envelopes import EnvelopeClaims
from policy.trust_root import SignedStatement, TrustRoot

_GRANT_COLUMNS = ("g.grant_id, g.environment, g.tool, g.rule, g.targets, g.max_executions, g.max_repetitions, "
                  "g.expires_at, g.granted_by, g.statement, g.signature, "
                  "(SELECT count(*) FROM capability_grant_uses u WHERE u.grant_id = g.grant_id)")
_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended('capability_grant:' || %s, 0))"


class GrantLookup(BaseModel):
    """The grants that count, how often this argv ran under each, and the rows that count for nothing."""

    model_config = ConfigDict(frozen=True)

    grants: tuple[CapabilityGrant, ...] = ()
    repetitions: dict[str, int] = {}
    ignored: tuple[str, ...] = ()


class GrantRefused(ValueError):
    """A statement the executors would not honour; it is not stored (the message says why)."""


def _signed(statement: Any, signature: Any) -> SignedStatement | str:
    try:
        return SignedStatement.model_validate({"statement": statement, "signature": signature})
    except ValidationError:
        return "not a signed trust statement"


def _judge_row(row: tuple, revocations: Iterable[tuple[Any, Any]], root: TrustRoot) -> CapabilityGrant | str:
    """The grant a stored row carries, judged from its signed body, or why it counts for nothing."""
    gid, env, tool, rule, targets, max_exec, max_rep, expires, by, statement, signature, used = row
    signed = _signed(statement, signature)
    if isinstance(signed, str):
        return signed
    if signed.statement.subject != gid:
        return "the row's grant id is not the one its statement was signed for"
    terms = signed_terms(signed, root)
    if isinstance(terms, str):
        return terms
    try:
        columns = GrantTerms(environment=env, tool=tool, rule=rule, targets=tuple(targets), max_executions=max_exec,
                             max_repetitions=max_rep, expires_at=expires, granted_by=by)
    except ValidationError:
        columns = None
    if columns != terms:
        return "the row's columns differ from its signed statement"
    revoked = False
    for r_statement, r_signature in revocations:
        revocation = _signed(r_statement, r_signature)
        if not isinstance(revocation, str) and revokes(revocation, root, gid):
            revoked = True
            break
    return grant_of(gid, terms, executions_used=int(used), revoked=revoked)


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

    async def record_grant(self, signed: SignedStatement, root: TrustRoot) -> CapabilityGrant:
        """Store an administrator's signed grant; GrantRefused unless a key pinned in ``root`` signed it, so a
        grant no executor will honour is never written by this code."""
        terms = signed_terms(signed, root)
        if isinstance(terms, str):
            raise GrantRefused(f"refused to store the grant: {terms}")
        gid = signed.statement.subject
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO capability_grants (grant_id, environment, tool, rule, targets, max_executions, "
                "max_repetitions, expires_at, granted_by, statement, signature) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (gid, terms.environment, terms.tool, terms.rule, list(terms.targets), terms.max_executions,
                 terms.max_repetitions, terms.expires_at, terms.granted_by,
                 Jsonb(signed.statement.model_dump(mode="json")), signed.signature))
        return grant_of(gid, terms, executions_used=0, revoked=False)

    async def record_revocation(self, signed: SignedStatement, root: TrustRoot) -> bool:
        """Store an administrator's signed revocation; False when the grant does not count (unknown, not
        signed by a pinned administrator, or already revoked), GrantRefused when the revocation is not signed
        by a pinned administrator."""
        gid = signed.statement.subject
        if not revokes(signed, root, gid):
            raise GrantRefused("refused to store the revocation: it is not a revoke_capability statement signed "
                               "by a pinned administrator")
        current = await self.grant(gid, root)
        if current is None or current.revoked:
            return False
        st = signed.statement
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO capability_grant_revocations (statement_id, grant_id, statement, signature) "
                "VALUES (%s, %s, %s, %s)",
                (st.statement_id, gid, Jsonb(st.model_dump(mode="json")), signed.signature))
        return True

    async def _revocations(self, conn: Any, grant_ids: list[str]) -> dict[str, list[tuple[Any, Any]]]:
        rows = await (await conn.execute(
            "SELECT grant_id, statement, signature FROM capability_grant_revocations WHERE grant_id = ANY(%s)",
            (grant_ids,))).fetchall()
        out: dict[str, list[tuple[Any, Any]]] = {}
        for gid, statement, signature in rows:
            out.setdefault(gid, []).append((statement, signature))
        return out

    async def grants_for(self, *, environment: str, tool: str, rule: str, argv_digest: str,
                         root: TrustRoot) -> GrantLookup:
        """The grants for this environment, tool and rule a pinned administrator signed and nobody revoked,
        how often this argv ran under each, and why every other stored row for them counts for nothing."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM capability_grants g WHERE g.environment = %s AND g.tool = %s "
                "AND g.rule = %s ORDER BY g.expires_at, g.grant_id", (environment, tool, rule))).fetchall()
            ids = [r[0] for r in rows]
            revocations = await self._revocations(conn, ids)
            uses = await (await conn.execute(
                "SELECT grant_id, count(*) FROM capability_grant_uses WHERE grant_id = ANY(%s) AND argv_digest = %s "
                "GROUP BY grant_id", (ids, argv_digest))).fetchall()
        grants: list[CapabilityGrant] = []
        ignored: list[str] = []
        for row in rows:
            judged = _judge_row(row, revocations.get(row[0], []), root)
            if isinstance(judged, str):
                ignored.append(f"grant {str(row[0])[:64]}: {judged}")
            elif not judged.revoked:
                grants.append(judged)
        return GrantLookup(grants=tuple(grants), repetitions={gid: n for gid, n in uses}, ignored=tuple(ignored))

    async def consume(self, grant: CapabilityGrant, claims: EnvelopeClaims, root: TrustRoot) -> CapabilityGrant:
        """Spend one execution of ``grant`` (as judged from its signed terms) for this envelope, or
        GrantExhausted saying why not: its uses and revocations are re-read under the grant's lock."""
        gid = grant.grant_id
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(_LOCK_KEY, (gid,))
                revocations = (await self._revocations(conn, [gid])).get(gid, [])
                if any(not isinstance(r, str) and revokes(r, root, gid) for r in (_signed(*x) for x in revocations)):
                    raise GrantExhausted(f"grant {gid} was revoked")
                counted = await (await conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE argv_digest = %s) FROM capability_grant_uses "
                    "WHERE grant_id = %s", (claims.argv_digest, gid))).fetchone()
                assert counted is not None  # an aggregate always returns a row
                used, repetitions = counted
                current = grant.model_copy(update={"executions_used": int(used)})
                reason = capacity_refusal(current, now=datetime.now(timezone.utc), repetitions_of_argv=int(repetitions))
                if reason is not None:
                    raise GrantExhausted(reason)
                await conn.execute(
                    "INSERT INTO capability_grant_uses (grant_id, argv_digest, nonce, run_id, tool_call_id) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (gid, claims.argv_digest, claims.nonce, claims.run_id, claims.tool_call_id))
        return current.model_copy(update={"executions_used": current.executions_used + 1})

    async def grant(self, grant_id: str, root: TrustRoot) -> CapabilityGrant | None:
        """The grant as an executor would judge it now (None when no row for it counts)."""
        async with self._pool.connection() as conn:
            row = await (await conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM capability_grants g WHERE g.grant_id = %s", (grant_id,))).fetchone()
            if row is None:
                return None
            revocations = (await self._revocations(conn, [grant_id])).get(grant_id, [])
        judged = _judge_row(row, revocations, root)
        return None if isinstance(judged, str) else judged


class GrantExhausted(RuntimeError):
    """The grant lost its capacity between judging and consuming (another executor used it, or it was revoked)."""


class _Seen(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
