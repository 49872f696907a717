"""Things that belong, for good, to whoever claimed them first (migrations 025 and 026, insert-only).

- A session id belongs to the session's first run. Decisions are signed over the session id, turn and code
  hash, and a session keeps the nonces it used in its own state: a new run under a closed session's id started
  with none used and counted turns from one again, so it accepted the old session's decisions a second time.
- A signed decision belongs to the workflow run whose code it authorised. Temporal's reset rolls a session's
  state back (its used nonces with it) and re-sends the signals after the reset point, so the reset run
  accepted the same decision and ran its code again (one approval of a kill, two kills). The sandbox activity
  records the decision before the code starts; a retry of the same activity finds its own run and goes on.
"""

from __future__ import annotations

from psycopg import sql
from psycopg_pool import AsyncConnectionPool


async def _first_holder(pool: AsyncConnectionPool, table: str, key: tuple[str, str], holder: tuple[str, str],
                        **extra: str) -> str:
    """Claim ``key`` for ``holder`` in ``table`` unless someone has; the holder of the claim either way."""
    columns = [key[0], holder[0], *extra]
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO NOTHING").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)), sql.Identifier(key[0]))
    select = sql.SQL("SELECT {} FROM {} WHERE {} = %s").format(
        sql.Identifier(holder[0]), sql.Identifier(table), sql.Identifier(key[0]))
    async with pool.connection() as conn:
        await conn.execute(insert, (key[1], holder[1], *extra.values()))
        row = await (await conn.execute(select, (key[1],))).fetchone()
    assert row is not None  # inserted or already there; rows are never deleted
    return str(row[0])


class SessionIds:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def claim(self, session_id: str, run: str) -> str:
        """The run that holds ``session_id``: ``run`` if nobody held it, else the one that claimed it first."""
        return await _first_holder(self._pool, "session_ids", ("session_id", session_id), ("first_run", run))


class UsedDecisions:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def use(self, nonce: str, session_id: str, workflow_run: str) -> str:
        """The run the decision ``nonce`` authorised: ``workflow_run`` if it was unused, else the earlier one."""
        return await _first_holder(self._pool, "used_decisions", ("nonce", nonce), ("workflow_run", workflow_run),
                                   session_id=session_id)
