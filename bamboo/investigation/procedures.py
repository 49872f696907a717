"""Stored procedures and their durable auto-run grants, in the ``procedures`` table.

A procedure is keyed by its signature name (``proc__<tools>``), so the same step captured by different
sessions, phrasings or causes lands on one row. ``status`` is ``approved`` (code a human approved and that
ran in a resolved session) or ``tentative`` (kept from an abandoned or expired session: knowledge, not yet
trusted, never exposed as a tool). An approved row is never downgraded by a later tentative capture.

A grant is the triple (granted_by, granted_at, code_hash); the policy decides whether it still applies by
comparing that hash with the hash of the current code, so rewriting a procedure silently voids its grant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

from policy.code_identity import code_hash
from policy.grants import ProcedureGrant

ProcedureStatus = Literal["approved", "tentative"]


@dataclass(frozen=True)
class StoredProcedure:
    name: str
    code: str
    code_hash: str
    status: ProcedureStatus
    meta: dict[str, Any]


class ProcedureRepository:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def approved_code(self) -> dict[str, str]:
        """Current code of every approved procedure (what the policy judges and the bridge replays)."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, code FROM procedures WHERE status = 'approved' ORDER BY signature"
            )).fetchall()
        return {name: code for name, code in rows}

    async def get(self, name: str) -> StoredProcedure | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT signature, code, code_hash, status, meta FROM procedures WHERE signature = %s", (name,)
            )).fetchone()
        if row is None:
            return None
        return StoredProcedure(name=row[0], code=row[1], code_hash=row[2], status=row[3], meta=row[4] or {})

    async def save(self, name: str, code: str, status: ProcedureStatus, meta: dict[str, Any]) -> ProcedureStatus:
        """Insert or update; an approved row stays approved. Returns the status the row now has.

        Approving new code for an existing name replaces the code (and so voids any grant bound to the
        old code's hash); a tentative capture never replaces approved code.
        """
        async with self._pool.connection() as conn:
            # Every version is kept, so a review can show what changed since a grant was given.
            await conn.execute(
                "INSERT INTO procedure_versions (code_hash, signature, code) VALUES (%s, %s, %s) "
                "ON CONFLICT (code_hash) DO NOTHING", (code_hash(code), name, code))
            row = await (await conn.execute(
                "INSERT INTO procedures (signature, code, code_hash, status, meta) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (signature) DO UPDATE SET "
                "code = CASE WHEN procedures.status = 'approved' AND EXCLUDED.status = 'tentative' "
                "            THEN procedures.code ELSE EXCLUDED.code END, "
                "code_hash = CASE WHEN procedures.status = 'approved' AND EXCLUDED.status = 'tentative' "
                "            THEN procedures.code_hash ELSE EXCLUDED.code_hash END, "
                "status = CASE WHEN procedures.status = 'approved' THEN 'approved' ELSE EXCLUDED.status END, "
                "meta = procedures.meta || EXCLUDED.meta "
                "RETURNING status",
                (name, code, code_hash(code), status, json.dumps(meta, default=str)),
            )).fetchone()
        return row[0]

    async def versions(self, hashes: list[str]) -> dict[str, str]:
        """The code each of ``hashes`` was computed from (hashes never stored are left out)."""
        if not hashes:
            return {}
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT code_hash, code FROM procedure_versions WHERE code_hash = ANY(%s)", (hashes,))).fetchall()
        return {h: code for h, code in rows}

    async def grants(self) -> dict[str, ProcedureGrant]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, auto_run_code_hash, auto_run_granted_by, auto_run_granted_at FROM procedures "
                "WHERE auto_run_code_hash IS NOT NULL AND auto_run_granted_by IS NOT NULL ORDER BY signature"
            )).fetchall()
        return {
            name: ProcedureGrant(procedure=name, code_hash=hash_, granted_by=by, granted_at=at)
            for name, hash_, by, at in rows
        }

    async def set_grant(self, grant: ProcedureGrant) -> bool:
        """Record a durable grant; False when the procedure is not stored (nothing to grant)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE procedures SET auto_run_code_hash = %s, auto_run_granted_by = %s, auto_run_granted_at = %s "
                "WHERE signature = %s",
                (grant.code_hash, grant.granted_by, grant.granted_at, grant.procedure),
            )
            return cur.rowcount > 0

    async def clear_grant(self, name: str) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE procedures SET auto_run_code_hash = NULL, auto_run_granted_by = NULL, "
                "auto_run_granted_at = NULL WHERE signature = %s AND auto_run_code_hash IS NOT NULL",
                (name,),
            )
            return cur.rowcount > 0
