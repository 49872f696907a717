"""Stored procedures and their durable auto-run grants, in the ``procedures`` table.

A procedure is keyed by its signature name (``proc__<tools>``), so the same step captured by different
sessions, phrasings or causes lands on one row. ``status`` is ``approved`` (code a human approved and that
ran in a resolved session) or ``tentative`` (kept from an abandoned or expired session: knowledge, not yet
trusted, never exposed as a tool). An approved row is never downgraded by a later tentative capture.

Captures are de-duplicated by signature: code equivalent to the stored body (same syntax tree,
``policy.code_identity.logic_hash``) keeps the stored text, the one people reviewed, and only adds to the
row's provenance (``bamboo.investigation.provenance``: frequency, incidents, triggers); different code becomes
the current version, the old one stays in ``procedure_versions``, and the provenance says which it replaced.

A grant is the triple (granted_by, granted_at, code_hash); the policy decides whether it still applies by
comparing that hash with the hash of the current code, so rewriting a procedure silently voids its grant.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from bamboo.investigation.provenance import Capture, ProcedureProvenance
from policy.code_identity import code_hash, logic_hash
from policy.procedures import is_procedure_name
from policy.grants import (
    GrantRevocation, ProcedureGrant, covering_terms, grant_is_revoked, grant_term, revocation_of,
    revocation_of_procedures,
)

log = logging.getLogger(__name__)


ProcedureStatus = Literal["approved", "tentative"]


@dataclass(frozen=True)
class StoredProcedure:
    name: str
    code: str
    code_hash: str
    status: ProcedureStatus
    meta: dict[str, Any]

    @property
    def provenance(self) -> ProcedureProvenance:
        return ProcedureProvenance.of(self.meta)


CaptureOutcome = Literal["new", "same", "new_version", "kept"]


@dataclass(frozen=True)
class Captured:
    """What a capture did: the row's status now, and whether the code was new, equivalent to the stored body
    (``same``), a new version replacing it, or a tentative version kept beside an approved body (``kept``)."""

    status: ProcedureStatus
    outcome: CaptureOutcome
    code_hash: str


class ProcedureRepository:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def approved_code(self) -> dict[str, str]:
        """Current code of every approved procedure (what the policy judges and the bridge replays). Only rows named
        as procedures are (``proc__``): a row named after a raw tool made the policy judge that tool's calls by the
        row's body."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, code FROM procedures WHERE status = 'approved' ORDER BY signature"
            )).fetchall()
        return {name: code for name, code in rows if is_procedure_name(name)}

    async def get(self, name: str) -> StoredProcedure | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT signature, code, code_hash, status, meta FROM procedures WHERE signature = %s", (name,)
            )).fetchone()
        if row is None:
            return None
        return StoredProcedure(name=row[0], code=row[1], code_hash=row[2], status=row[3], meta=row[4] or {})

    async def approved(self) -> list[StoredProcedure]:
        """Every approved procedure with its provenance, one per signature (what the reuse step matches): rows named
        as procedures only, as ``approved_code``."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, code, code_hash, status, meta FROM procedures WHERE status = 'approved' "
                "ORDER BY signature")).fetchall()
        return [StoredProcedure(name=r[0], code=r[1], code_hash=r[2], status=r[3], meta=r[4] or {}) for r in rows
                if is_procedure_name(r[0])]

    async def save(self, name: str, code: str, status: ProcedureStatus,
                   meta: dict[str, Any] | None = None) -> ProcedureStatus:
        """``capture`` with the provenance ``meta`` describes (no incident: nothing is counted)."""
        return (await self.capture(name, code, status, Capture.model_validate(meta or {}))).status

    async def capture(self, name: str, code: str, status: ProcedureStatus, capture: Capture) -> Captured:
        """Store one capture of a procedure, de-duplicated by signature (module docstring).

        Approving different code for an existing name replaces the current body (and so voids any grant bound
        to the old body's hash: grants are bound to code hashes); a tentative capture never replaces approved
        code. Serialised per signature, so concurrent finalizes count every incident once.
        """
        hash_ = code_hash(code)
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('procedure:' || %s))", (name,))
            # Every version is kept, so a review can show what changed since a grant was given.
            await conn.execute(
                "INSERT INTO procedure_versions (code_hash, signature, code) VALUES (%s, %s, %s) "
                "ON CONFLICT (code_hash) DO NOTHING", (hash_, name, code))
            row = await (await conn.execute(
                "SELECT code, code_hash, status, meta FROM procedures WHERE signature = %s", (name,))).fetchone()
            if row is None:
                record = ProcedureProvenance().merged(capture)
                await conn.execute(
                    "INSERT INTO procedures (signature, code, code_hash, status, meta) VALUES (%s, %s, %s, %s, %s)",
                    (name, code, hash_, status, json.dumps(record.meta())))
                return Captured(status=status, outcome="new", code_hash=hash_)
            old_code, old_hash, old_status, meta = row
            record = ProcedureProvenance.of(meta)
            if logic_hash(old_code) == logic_hash(code):
                outcome: CaptureOutcome = "same"
                kept_code, kept_hash = old_code, old_hash
                record = record.merged(capture)
            elif old_status == "approved" and status == "tentative":
                outcome, kept_code, kept_hash = "kept", old_code, old_hash
            else:
                outcome, kept_code, kept_hash = "new_version", code, hash_
                record = record.merged(capture).replaced(old_hash)
            new_status: ProcedureStatus = "approved" if "approved" in (old_status, status) else "tentative"
            await conn.execute(
                "UPDATE procedures SET code = %s, code_hash = %s, status = %s, meta = %s WHERE signature = %s",
                (kept_code, kept_hash, new_status, json.dumps({**(meta or {}), **record.meta()}), name))
        return Captured(status=new_status, outcome=outcome, code_hash=kept_hash)

    async def record_run(self, name: str, code_hash_: str, at: datetime, status: str) -> bool:
        """Note a run of the procedure's current body (a reused turn); False when the body changed since."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE procedures SET meta = meta || %s::jsonb WHERE signature = %s AND code_hash = %s",
                (json.dumps({"last_run_at": at.isoformat(), "last_run_status": status}), name, code_hash_))
            return cur.rowcount > 0

    async def versions(self, hashes: list[str]) -> dict[str, str]:
        """The code each of ``hashes`` was computed from (hashes never stored are left out). A row whose code does
        not hash to its key is left out too: the table is writable, and the text is shown as the version a grant
        was given on or a reused procedure had before (a forged, innocuous diff beside the code reviewed)."""
        if not hashes:
            return {}
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT code_hash, code FROM procedure_versions WHERE code_hash = ANY(%s)", (hashes,))).fetchall()
        return await asyncio.to_thread(lambda: {h: code for h, code in rows if code_hash(code) == h})

    async def grants(self) -> dict[str, ProcedureGrant]:
        """The stored grants as rows hold them, less those revoked: whoever relies on one checks its signature
        (policy.grants.grant_is_signed); a row that is not a grant is left out."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, auto_run_code_hash, auto_run_granted_by, auto_run_granted_at, auto_run_session, "
                "auto_run_decision FROM procedures "
                "WHERE auto_run_code_hash IS NOT NULL AND auto_run_granted_by IS NOT NULL ORDER BY signature"
            )).fetchall()
            revoked = await _revocations(conn, [grant_term(name, hash_) for name, hash_, *_ in rows])
        out = {}
        for name, hash_, by, at, session, decision in rows:
            try:
                grant = ProcedureGrant(procedure=name, code_hash=hash_, granted_by=by, granted_at=at,
                                       session_id=session or "", decision=decision)
            except ValidationError:
                log.warning("the durable grant of %s is not a grant (ignored)", name)
                continue
            if not grant_is_revoked(grant, revoked):
                out[name] = grant
        return out

    async def is_revoked(self, grant: ProcedureGrant) -> bool:
        """Whether a recorded revocation covers ``grant``'s signed answer (policy.grants.grant_is_revoked)."""
        async with self._pool.connection() as conn:
            return grant_is_revoked(grant, await _revocations(conn, [grant.term]))

    async def withheld(self, terms: list[str], now: datetime) -> dict[str, datetime]:
        """Of ``terms``, those a recorded revocation still covers for an answer signed now, with when a grant of
        each may be left again (the latest ``through``): the review offers none of them."""
        covering = {term: covering_terms(term) for term in terms}
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT term, max(through) FROM revoked_grants WHERE term = ANY(%s) AND through > %s GROUP BY term",
                (sorted({t for c in covering.values() for t in c}), now))).fetchall()
        until: dict[str, datetime] = dict(rows)
        return {term: max(until[t] for t in ways if t in until) for term, ways in covering.items()
                if any(t in until for t in ways)}

    async def revoke_whole(self, procedures: list[str], every: bool) -> bool:
        """Revoke every answer naming ``procedures`` (or, ``every``, every answer that grants anything) signed until
        now, whatever the grant rows hold, and clear their rows (``policy.grants.revocation_of_procedures``): a row
        broken before the revocation, so that no grant was in force to revoke, is revoked all the same when it is
        written back. True when something was recorded (a retry records it again, which changes nothing)."""
        revocations = revocation_of_procedures(procedures, every, datetime.now(UTC))
        async with self._pool.connection() as conn, conn.transaction():
            for revocation in revocations:
                await _insert_revocation(conn, revocation)
            await conn.execute(_CLEAR_GRANT_ROWS + "(%s OR signature = ANY(%s))", (every, procedures))
        return bool(revocations)

    async def set_grant(self, grant: ProcedureGrant) -> bool:
        """Record a durable grant with the signed answer that made it; False when the procedure is not stored."""
        decision = Jsonb(grant.decision.model_dump(mode="json")) if grant.decision is not None else None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE procedures SET auto_run_code_hash = %s, auto_run_granted_by = %s, auto_run_granted_at = %s, "
                "auto_run_session = %s, auto_run_decision = %s WHERE signature = %s",
                (grant.code_hash, grant.granted_by, grant.granted_at, grant.session_id or None, decision,
                 grant.procedure),
            )
            return cur.rowcount > 0

    async def clear_grant(self, grant: ProcedureGrant) -> bool:
        """Revoke ``grant`` (as the caller checked it, not as the row holds it now: a requester who rewrote the
        row between the check and the revocation had a term nobody used recorded, and wrote the checked answer
        back): its signed answer is recorded as revoked with every answer of the term signed no later
        (insert-only, ``policy.grants.revocation_of``), and the row is cleared. True when something was revoked."""
        revocation = revocation_of(grant, datetime.now(UTC))
        async with self._pool.connection() as conn:
            if revocation is not None:
                await _insert_revocation(conn, revocation)
            cur = await conn.execute(_CLEAR_GRANT_ROWS + "signature = %s", (grant.procedure,))
            return revocation is not None or cur.rowcount > 0


# Clears the grant columns of the rows the appended condition names (that hold a grant at all).
_CLEAR_GRANT_ROWS = ("UPDATE procedures SET auto_run_code_hash = NULL, auto_run_granted_by = NULL, auto_run_granted_at = NULL, "
                     "auto_run_session = NULL, auto_run_decision = NULL WHERE auto_run_code_hash IS NOT NULL AND ")


async def _insert_revocation(conn: Any, revocation: GrantRevocation) -> None:
    """Record ``revocation`` in the insert-only table: its time cover under a fresh random key, and the answer it
    names (if any) under that answer's nonce. Keyed by what a requester can know beforehand (the answer's nonce is
    in the grant row, a revoke's name in the session's history), a row they inserted first, with no time, made the
    revocation's own insert a no-op, and the grant written back counted again."""
    rows = [(f"revocation:{secrets.token_hex(16)}", revocation.term, revocation.through)]
    if revocation.nonce:
        rows.append((revocation.nonce, revocation.term, None))
    for row in rows:
        await conn.execute("INSERT INTO revoked_grants (nonce, term, through) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                           row)


async def _revocations(conn: Any, terms: list[str]) -> list[GrantRevocation]:
    """The recorded revocations that cover ``terms`` (revoked_grants, insert-only): each term's own, its procedure's
    and every grant's (``policy.grants.covering_terms``)."""
    covering = sorted({t for term in terms for t in covering_terms(term)})
    rows = await (await conn.execute("SELECT nonce, term, through FROM revoked_grants WHERE term = ANY(%s)",
                                     (covering,))).fetchall()
    return [GrantRevocation(nonce=nonce, term=term, through=through) for nonce, term, through in rows]
