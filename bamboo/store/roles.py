"""The app's database role: everything it needs, and no way to rewrite the audit log.

The schema is owned by the role that runs the migrations (`BAMBOO_DATABASE_OWNER_URL`). The app
connects as another role (`BAMBOO_DATABASE_URL`) that may read and write the knowledge tables but
may only SELECT and INSERT audit rows, and only read the bookkeeping tables. Grants alone would not
stop the owner, and the trigger alone would not stop an owner who disables it; together, an app
that is not the owner cannot change audit rows at all. The grants are re-applied after every
migration run (they are idempotent), so tables added later are covered.

Where each holds:
- app role separate from the owner (production; the embedded stack's `bamboo_app`): grants and trigger;
- app connects as the owner (a single-URL deployment, the test databases): only the trigger, which
  the owner could disable; `bamboo audit verify` says so, and the signed checkpoint still catches
  rows removed or rewritten.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

READ_ONLY_TABLES = ("schema_migrations", "store_meta")
# Insert-only for the app role: the audit log and the record of its checkpoints' starts, the administrators'
# statements, capability grants with their uses and revocations (a use deleted would refill a grant; migration
# 021), the executors' accepted nonces (a nonce deleted would be free to replay), and the sessions' ids (an id
# freed would let a new run accept a closed session's decisions again; migration 025), and the decisions runs
# used (one freed would let a reset run the same signed approval again; migration 026), and the durable grants
# revoked (one freed would let the grant's still-valid signed answer grant again; migration 028).
APPEND_ONLY_TABLES = ("audit", "audit_checkpoint_starts", "trust_statements", "capability_grants",
                      "capability_grant_uses", "capability_grant_revocations", "executor_nonces", "session_ids",
                      "used_decisions", "revoked_grants")


async def grant_app_role(conn: psycopg.AsyncConnection, role: str) -> None:
    """Give `role` what the app needs in the public schema, with audit append-only for it."""
    r = sql.Identifier(role)
    tables = [row[0] for row in await (await conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).fetchall()]
    async with conn.transaction():
        await conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(r))
        for table in tables:
            t = sql.Identifier(table)
            await conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(t, r))
            if table in READ_ONLY_TABLES:
                privileges = "SELECT"
            elif table in APPEND_ONLY_TABLES:
                privileges = "SELECT, INSERT"
            else:
                privileges = "SELECT, INSERT, UPDATE, DELETE"
            await conn.execute(sql.SQL("GRANT " + privileges + " ON {} TO {}").format(t, r))
        await conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(r))
