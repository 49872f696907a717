"""Append-only, hash-chained audit log on Postgres.

Appends serialise on an advisory lock so the chain has exactly one successor per row. A
``dedup_key`` makes a retried activity's append a no-op instead of a duplicate row.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from bamboo.audit import AuditEvent
from policy.audit_hash import GENESIS, row_hash

AUDIT_LOCK = 0x6A6D_A0D


class ChainReport(BaseModel):
    rows: int
    ok: bool
    first_bad_seq: int | None = None
    reason: str | None = None


class PostgresAuditLog:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        """The new row's sequence number, or None when `dedup_key` was already recorded."""
        return (await self.append_many([(event, dedup_key)]))[0]

    async def append_many(self, events: list[tuple[AuditEvent, str | None]]) -> list[int | None]:
        """Several rows under one lock and one transaction (a group of stored incidents), in order.
        Each is skipped when its dedup key is already recorded, including earlier in the same call."""
        if not events:
            return []
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (AUDIT_LOCK,))
                keys = [k for _, k in events if k]
                seen: set[str] = set()
                if keys:
                    rows = await (await conn.execute(
                        "SELECT dedup_key FROM audit WHERE dedup_key = ANY(%b)", (keys,))).fetchall()
                    seen = {r[0] for r in rows}
                last = await (await conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")).fetchone()
                seq, prev = (last[0], last[1]) if last else (0, GENESIS)
                at = datetime.now(timezone.utc).isoformat()
                out: list[int | None] = []
                rows_to_insert = []
                for event, dedup_key in events:
                    if dedup_key and dedup_key in seen:
                        out.append(None)
                        continue
                    if dedup_key:
                        seen.add(dedup_key)
                    seq += 1
                    body = json.loads(json.dumps(event.body, default=str))
                    digest = row_hash(prev, seq, at, event.actor, event.run_id, event.kind, body)
                    rows_to_insert.append((seq, at, event.actor, event.run_id, event.kind, json.dumps(body), dedup_key,
                                           prev, digest))
                    prev = digest
                    out.append(seq)
                if rows_to_insert:
                    async with conn.cursor() as cur:
                        await cur.executemany(
                            "INSERT INTO audit (seq, at, actor, run_id, kind, body, dedup_key, prev_hash, hash) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            rows_to_insert,
                        )
                return out

    async def verify(self) -> ChainReport:
        """Walk the chain from the first row; report the first row whose link or content does not hold."""
        prev = GENESIS
        count = 0
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, at, actor, run_id, kind, body, prev_hash, hash FROM audit ORDER BY seq"
            )
            expected_seq = 1
            async for seq, at, actor, run_id, kind, body, prev_hash, digest in cur:
                count += 1
                if seq != expected_seq:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq,
                                       reason=f"row {expected_seq} is missing (found {seq} next)")
                if prev_hash != prev:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq,
                                       reason="prev_hash does not match the previous row's hash")
                at_text = at.astimezone(timezone.utc).isoformat() if isinstance(at, datetime) else str(at)
                if row_hash(prev, seq, at_text, actor, run_id, kind, body) != digest:
                    return ChainReport(rows=count, ok=False, first_bad_seq=seq,
                                       reason="row content does not match its hash (modified after writing)")
                prev = digest
                expected_seq += 1
        return ChainReport(rows=count, ok=True)

    async def tail(self, limit: int = 20) -> list[dict]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT seq, at, actor, run_id, kind, body FROM audit ORDER BY seq DESC LIMIT %s", (limit,)
            )).fetchall()
        return [dict(seq=r[0], at=r[1].isoformat(), actor=r[2], run_id=r[3], kind=r[4], body=r[5]) for r in rows]
