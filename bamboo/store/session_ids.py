"""Which run holds an investigation session's id (migration 025): the first to ask, for good.

A session's signed decisions name its id, turn and code hash; the session keeps the nonces it used in its own
state. A new run under a closed session's id starts with none used and counts turns from one again, so it
accepted the old session's decisions a second time (an approval of one kill ran two). The first run of a
session claims its id here, and a later run under the same id learns that another run holds it.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool


class SessionIds:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def claim(self, session_id: str, run: str) -> str:
        """The run that holds ``session_id``: ``run`` if nobody held it, else the one that claimed it first."""
        async with self._pool.connection() as conn:
            await conn.execute("INSERT INTO session_ids (session_id, first_run) VALUES (%s, %s) "
                               "ON CONFLICT (session_id) DO NOTHING", (session_id, run))
            row = await (await conn.execute("SELECT first_run FROM session_ids WHERE session_id = %s",
                                            (session_id,))).fetchone()
        assert row is not None  # inserted or already there; rows are never deleted
        return str(row[0])
