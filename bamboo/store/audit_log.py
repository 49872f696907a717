"""Append-only, hash-chained audit log on Postgres, anchored by signed checkpoints outside it.

Appends serialise on an advisory lock so the chain has exactly one successor per row. A
``dedup_key`` names the row's *subject* (the graph a batch stored, the decision a session took):
an append whose key is already recorded is a no-op, so a retried or repeated write is audited once.
`append_in` appends inside the caller's transaction, so a row exists exactly when the write it
describes committed.

Three defences, each for what the others cannot do:
- the chain (`policy.audit_hash`): a changed, removed or reordered row breaks every later link;
- the table refuses UPDATE, DELETE and TRUNCATE: a trigger for everyone including its owner, and
  grants for an app role that is not the owner (see `bamboo.store.roles`);
- signed checkpoints (`bamboo.store.audit_checkpoint`): a chain cut short or rewritten with
  recomputed hashes no longer reaches, or no longer passes through, the newest signed head.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from bamboo.audit import AuditEvent
from bamboo.store.audit_checkpoint import CheckpointError, CheckpointFile
from bamboo.store.outage import NO_WAIT, OutagePolicy, waits_out_outages
from policy.audit_hash import GENESIS, row_hash

log = logging.getLogger(__name__)

AUDIT_LOCK = 0x6A6D_A0D
APPEND_ONLY_TRIGGERS = ("audit_append_only_rows", "audit_append_only_truncate")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class ChainReport(BaseModel):
    rows: int
    ok: bool
    first_bad_seq: int | None = None
    reason: str | None = None
    checkpoint_seq: int | None = Field(default=None, description="the newest signed checkpoint the chain reaches")
    checkpoint_at: str | None = None
    warnings: list[str] = Field(default_factory=list)


@dataclass
class Appended:
    """What `append_in` wrote: each event's sequence number (None: its key was already recorded), the
    chain's new head when a row was added, and — read in the same statement, under the chain lock —
    whether the chain still passed through the checkpoint this process knows, so signing the new
    head costs no query of its own."""

    seqs: list[int | None] = field(default_factory=list)
    head: tuple[int, str] | None = None
    anchor: tuple[int, str, bool] | None = None  # (seq, signed hash, the row at seq has that hash)


def storable(value: Any) -> Any:
    """The body as Postgres' jsonb can hold it: NUL and unpaired surrogates become visible escapes
    (`\\u0000`), so an event about hostile bytes is recorded instead of failing to be."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", value) if _UNSTORABLE.search(value) else value
    if isinstance(value, dict):
        return {storable(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


class PostgresAuditLog:
    def __init__(self, pool: AsyncConnectionPool, *, outage: OutagePolicy = NO_WAIT,
                 checkpoints: CheckpointFile | None = None) -> None:
        self._pool = pool
        self.outage = outage
        self.checkpoints = checkpoints
        self._chain_id: str | None = None
        self._pending: Appended | None = None  # the newest committed head not signed yet
        self._signer: asyncio.Task | None = None
        self._anchor: tuple[int, str] | None = None  # the checkpoint this process last saw or wrote
        self._anchor_read = False
        self._wrote_first_row = False  # this process began the chain, so it may start its checkpoint
        self._start_reason: str | None = None  # an operator's explicit start (`bamboo audit checkpoint`)

    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        """The new row's sequence number, or None when `dedup_key` was already recorded."""
        return (await self.append_many([(event, dedup_key)]))[0]

    @waits_out_outages("append audit rows")
    async def append_many(self, events: list[tuple[AuditEvent, str | None]]) -> list[int | None]:
        """Several rows under one lock and one transaction (a group of stored incidents), in order.
        Each is skipped when its dedup key is already recorded, including earlier in the same call."""
        if not events:
            return []
        async with self._pool.connection() as conn:
            async with conn.transaction():
                appended = await self.append_in(conn, events)
            await self.checkpoint(conn, appended)
        return appended.seqs

    async def append_in(self, conn: Any, events: list[tuple[AuditEvent, str | None]]) -> Appended:
        """Append inside the transaction `conn` holds: the rows commit or roll back with the caller's
        write. Takes the chain lock until that transaction ends, so call it last."""
        out = Appended()
        if not events:
            return out
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (AUDIT_LOCK,))
        keys = [k for _, k in events if k]
        seen: set[str] = set()
        if keys:
            rows = await (await conn.execute("SELECT dedup_key FROM audit WHERE dedup_key = ANY(%b)", (keys,))).fetchall()
            seen = {r[0] for r in rows}
        anchor = self._known_anchor()
        rows = await (await conn.execute(
            "SELECT seq, hash FROM audit WHERE seq = (SELECT max(seq) FROM audit) OR seq = %s",
            (anchor[0] if anchor else -1,))).fetchall()
        by_seq = dict(rows)
        last = max(by_seq) if by_seq else None
        seq, prev = (last, by_seq[last]) if last is not None else (0, GENESIS)
        if anchor is not None:
            out.anchor = (anchor[0], anchor[1], by_seq.get(anchor[0]) == anchor[1])
            await self._chain(conn)
        at = datetime.now(timezone.utc).isoformat()
        rows_to_insert = []
        for event, dedup_key in events:
            if dedup_key and dedup_key in seen:
                out.seqs.append(None)
                continue
            if dedup_key:
                seen.add(dedup_key)
            seq += 1
            body = storable(json.loads(json.dumps(event.body, default=str)))
            digest = row_hash(prev, seq, at, event.actor, event.run_id, event.kind, body)
            rows_to_insert.append((seq, at, event.actor, event.run_id, event.kind, json.dumps(body), dedup_key,
                                   prev, digest))
            prev = digest
            out.seqs.append(seq)
        if rows_to_insert:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO audit (seq, at, actor, run_id, kind, body, dedup_key, prev_hash, hash) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows_to_insert,
                )
            out.head = (seq, prev)
        return out

    def _known_anchor(self) -> tuple[int, str] | None:
        if self.checkpoints is None:
            return None
        if not self._anchor_read:
            self._anchor_read = True
            self._refresh_anchor()
        return self._anchor

    def _refresh_anchor(self) -> None:
        assert self.checkpoints is not None
        try:
            current = self.checkpoints.read()
        except CheckpointError:
            current = None
        self._anchor = (current.seq, current.head) if current else None

    async def checkpoint(self, conn: Any, appended: Appended) -> None:
        """After the commit: have the new head signed. Off the append's path: one signer per process
        signs the newest head it has been given, so a burst of appends (a sandbox run's tool calls)
        costs one checkpoint, not one each. Never fails the write it follows — a checkpoint not written
        leaves an older one, which `verify` still holds the chain against."""
        if self.checkpoints is None or appended.head is None:
            return
        if 1 in appended.seqs:
            self._wrote_first_row = True
        if self._pending is None or self._pending.head is None or appended.head[0] > self._pending.head[0]:
            self._pending = appended
        if self._signer is None or self._signer.done():
            self._signer = asyncio.create_task(self._sign_pending())

    async def flush_checkpoints(self) -> None:
        """Wait until every head handed to `checkpoint` is signed (or found not to pass through the
        current checkpoint). Called before the pool closes, and by tests that read the file."""
        while self._signer is not None and not self._signer.done():
            await asyncio.shield(self._signer)

    async def _sign_pending(self) -> None:
        assert self.checkpoints is not None
        while self._pending is not None:
            appended, self._pending = self._pending, None
            assert appended.head is not None
            try:
                written = await self.checkpoints.advance(await self._chain(None), *appended.head,
                                                         self._passes_through(appended), self._may_start)
            except Exception as exc:  # noqa: BLE001 — the next append tries again with a newer head
                log.error("could not write the audit checkpoint for row %s: %s", appended.head[0], exc)
                continue
            if written:
                self._anchor = appended.head
            else:  # another worker moved it, or the chain no longer passes through it: look again
                self._refresh_anchor()

    async def _may_start(self, seq: int) -> bool:
        """Whether a first checkpoint may be signed at row ``seq``, recording the start when it may: only
        for a chain this process began, or when an operator asked (`bamboo audit checkpoint --start-new`),
        and never again by itself once this chain's checkpoints were started (the file went missing)."""
        assert self.checkpoints is not None
        chain = await self._chain(None)
        async with self._pool.connection() as conn:
            started = await (await conn.execute(
                "SELECT started_at FROM audit_checkpoint_starts WHERE chain = %s ORDER BY id DESC LIMIT 1",
                (chain,))).fetchone()
            reason = self._start_reason
            if reason is None:
                if started is not None:
                    log.error("the audit checkpoint %s is missing, but this chain's checkpoints were started at %s: "
                              "not starting a new one (rows may have been removed with it); run `bamboo audit "
                              "verify`, then `bamboo audit checkpoint --start-new` once investigated",
                              self.checkpoints.path, started[0].isoformat())
                    return False
                if not self._wrote_first_row:
                    log.error("the audit chain has rows this process did not begin and no checkpoint at %s: not "
                              "starting one by itself; run `bamboo audit checkpoint --start-new` to start it",
                              self.checkpoints.path)
                    return False
                reason = "the first checkpoint of a new chain"
            await conn.execute(
                "INSERT INTO audit_checkpoint_starts (chain, key_id, head_seq, reason) VALUES (%s, %s, %s, %s)",
                (chain, self.checkpoints.key_id, seq, reason))
        self._start_reason = None
        return True

    async def start_new_checkpoint(self, actor: str, reason: str) -> tuple[int, Path | None]:
        """An operator's explicit start of a new checkpoint over the chain as it is: the old checkpoint (if
        any) is kept beside the file, the start is audited and recorded, and the new head is signed.
        Returns (the signed row, where the old checkpoint was kept)."""
        if self.checkpoints is None:
            raise CheckpointError("no audit checkpoint is configured (BAMBOO_AUDIT_CHECKPOINT_FILE and "
                                  "BAMBOO_AUDIT_SIGNING_KEY); there is nothing to start")
        report = await self.verify()
        if report.first_bad_seq is not None and report.checkpoint_seq is None:
            raise CheckpointError(f"the chain itself is broken at row {report.first_bad_seq} ({report.reason}); a "
                                  "checkpoint would sign a broken chain: keep the evidence and restore the database")
        kept = self.checkpoints.set_aside()
        self._start_reason = reason
        seq = await self.append(AuditEvent(kind="audit_checkpoint_started", actor=actor, body={
            "reason": reason, "previous_checkpoint_kept_at": str(kept) if kept else None,
            "verification_before": report.reason or "intact"}))
        await self.flush_checkpoints()
        current = self.checkpoints.read()
        if current is None or seq is None or current.seq < seq:
            raise CheckpointError(f"the new checkpoint was not written to {self.checkpoints.path}; see the log")
        return current.seq, kept

    def _passes_through(self, appended: Appended):
        async def passes_through(seq: int, digest: str) -> bool:
            if appended.anchor is not None and appended.anchor[:2] == (seq, digest):
                return appended.anchor[2]  # read with the append, under the chain lock
            async with self._pool.connection() as conn:
                row = await (await conn.execute("SELECT hash FROM audit WHERE seq = %s", (seq,))).fetchone()
            return row is not None and row[0] == digest
        return passes_through

    async def _chain(self, conn: Any | None) -> str:
        if self._chain_id is None:
            async with contextlib.AsyncExitStack() as stack:
                live: Any = conn if conn is not None else await stack.enter_async_context(self._pool.connection())
                row = await (await live.execute("SELECT value FROM store_meta WHERE key = 'audit_chain_id'")).fetchone()
            self._chain_id = row[0] if row else "unnamed"
        return self._chain_id

    async def verify(self) -> ChainReport:
        """Walk the chain from the first row; report the first row whose link or content does not hold,
        then hold the chain against the newest signed checkpoint: rows missing after it, or a head that
        is not the one signed, fail it too."""
        prev = GENESIS
        count = 0
        hash_at: dict[int, str] = {}
        async with self._pool.connection() as conn:
            checkpoint, warnings, problem = await self._checkpoint_for(conn)
            warnings += await _protection_warnings(conn)
            watch = checkpoint.seq if checkpoint else None
            cur = await conn.execute(
                "SELECT seq, at, actor, run_id, kind, body, prev_hash, hash FROM audit ORDER BY seq"
            )
            expected_seq = 1
            async for seq, at, actor, run_id, kind, body, prev_hash, digest in cur:
                count += 1
                if seq != expected_seq:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq, warnings=warnings,
                                       reason=f"row {expected_seq} is missing (found {seq} next)")
                if prev_hash != prev:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq, warnings=warnings,
                                       reason="prev_hash does not match the previous row's hash")
                at_text = at.astimezone(timezone.utc).isoformat() if isinstance(at, datetime) else str(at)
                if row_hash(prev, seq, at_text, actor, run_id, kind, body) != digest:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq, warnings=warnings,
                                       reason="row content does not match its hash (modified after writing)")
                if seq == watch:
                    hash_at[seq] = digest
                prev = digest
                expected_seq += 1
        if problem:
            return ChainReport(rows=count, ok=False, reason=problem, warnings=warnings)
        if checkpoint is None and self.checkpoints is not None:
            missing = await self._missing_checkpoint(count)
            if missing:
                return ChainReport(rows=count, ok=False, reason=missing, warnings=warnings)
        if checkpoint is None:
            return ChainReport(rows=count, ok=True, warnings=warnings)
        report = ChainReport(rows=count, ok=True, checkpoint_seq=checkpoint.seq, checkpoint_at=checkpoint.at,
                             warnings=warnings)
        if count < checkpoint.seq:
            first = count + 1
            missing = f"row {first} is" if first == checkpoint.seq else f"rows {first} to {checkpoint.seq} are"
            report.ok, report.first_bad_seq = False, first
            report.reason = (f"{missing} missing: the signed checkpoint of {checkpoint.at} covers row {checkpoint.seq} "
                             f"but the table ends at row {count} (truncated, or its newest rows deleted)")
        elif hash_at.get(checkpoint.seq) != checkpoint.head:
            report.ok, report.first_bad_seq = False, checkpoint.seq
            report.reason = (f"row {checkpoint.seq} is not the row signed at {checkpoint.at}: the chain was rewritten "
                             "(hashes recomputed) up to or past it")
        return report

    async def _checkpoint_for(self, conn: Any) -> tuple[Any, list[str], str | None]:
        """(the checkpoint to hold the chain against, warnings, a problem that fails verification)."""
        if self.checkpoints is None:
            return None, ["no signed checkpoint is configured, so rows cut off the end of the chain cannot be "
                          "detected; set BAMBOO_AUDIT_CHECKPOINT_FILE (the embedded stack keeps one under its "
                          "data directory)"], None
        path = self.checkpoints.path
        try:
            checkpoint = self.checkpoints.read()
        except CheckpointError as exc:
            return None, [], str(exc)
        if checkpoint is None:
            return None, [], None  # judged with the rows: see _missing_checkpoint
        if not self.checkpoints.signature_holds(checkpoint):
            return None, [], (f"the signed checkpoint {path} does not verify with the public key of "
                              f"{self.checkpoints.key_path}: it was altered or signed by another key")
        chain = await self._chain(conn)
        if checkpoint.chain != chain:
            return None, [], (f"the checkpoint {path} belongs to audit chain {checkpoint.chain} but this database's "
                              f"chain is {chain}: either this is not its database, or the chain id was changed")
        return checkpoint, [], None

    async def _missing_checkpoint(self, rows: int) -> str | None:
        """Why a missing checkpoint fails verification, or None for a chain that was never checkpointed and
        has no rows (a new database)."""
        assert self.checkpoints is not None
        path = self.checkpoints.path
        async with self._pool.connection() as conn:
            started = await (await conn.execute(
                "SELECT started_at, head_seq FROM audit_checkpoint_starts WHERE chain = %s ORDER BY id DESC LIMIT 1",
                (await self._chain(conn),))).fetchone()
        again = "after investigating, `bamboo audit checkpoint --start-new --reason ...` starts a new one"
        if started is not None:
            return (f"no signed checkpoint at {path}, but this chain's checkpoints were started at "
                    f"{started[0].isoformat()} (row {started[1]}): the checkpoint was removed, and with {rows} rows "
                    f"left nothing shows how many were cut off; {again}")
        if rows:
            return (f"no signed checkpoint at {path}, but the chain has {rows} rows: the checkpoint was removed, or "
                    f"the rows were written without the signing key; {again}")
        return None

    async def tail(self, limit: int = 20) -> list[dict]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT seq, at, actor, run_id, kind, body FROM audit ORDER BY seq DESC LIMIT %s", (limit,)
            )).fetchall()
        return [dict(seq=r[0], at=r[1].isoformat(), actor=r[2], run_id=r[3], kind=r[4], body=r[5]) for r in rows]


async def _protection_warnings(conn: Any) -> list[str]:
    """Whether the table still refuses rewrites, and whether it is this role's grants or only the
    trigger that refuse them."""
    row = await (await conn.execute(
        "SELECT current_user, pg_get_userbyid(c.relowner) = current_user, r.rolsuper, "
        "has_table_privilege(c.oid, 'UPDATE') OR has_table_privilege(c.oid, 'DELETE') "
        "OR has_table_privilege(c.oid, 'TRUNCATE') "
        "FROM pg_class c JOIN pg_roles r ON r.rolname = current_user WHERE c.oid = 'audit'::regclass"
    )).fetchone()
    triggers = dict(await (await conn.execute(
        "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'audit'::regclass AND NOT tgisinternal"
    )).fetchall())
    out = []
    off = [t for t in APPEND_ONLY_TRIGGERS if triggers.get(t, "D") == "D"]
    if off:
        out.append(f"the append-only trigger(s) {', '.join(off)} on audit are disabled or missing: someone with the "
                   "owner's rights turned them off, so rows may have been changed or removed since")
    role, owner, superuser, may_rewrite = row
    if may_rewrite:
        what = "a superuser" if superuser else "the audit table's owner" if owner else "a role granted UPDATE/DELETE"
        out.append(f"this connection's role {role} is {what}: only the append-only trigger keeps it from rewriting "
                   "audit, and it could disable the trigger; run the app as a role that is not the owner "
                   "(BAMBOO_DATABASE_OWNER_URL for migrations, BAMBOO_DATABASE_URL for the app)")
    return out
