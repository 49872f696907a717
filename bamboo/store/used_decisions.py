"""Which workflow run a signed decision authorised (migration 026): one, ever.

A session keeps the nonces of the decisions it accepted in its own state. Temporal's reset rolls that state back
and, by default, sends again the signals that came after the reset point, so the reset run accepted the same
signed decision and ran its code a second time (one approval of a kill, two kills). The sandbox activity records
a decision's nonce with its run before the code starts; a retry of the same activity finds its own run there and
goes on, any other run is refused.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool


class UsedDecisions:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def use(self, nonce: str, session_id: str, workflow_run: str) -> str:
        """The run the decision ``nonce`` authorised: ``workflow_run`` if it was unused, else the earlier one."""
        async with self._pool.connection() as conn:
            await conn.execute("INSERT INTO used_decisions (nonce, session_id, workflow_run) VALUES (%s, %s, %s) "
                               "ON CONFLICT (nonce) DO NOTHING", (nonce, session_id, workflow_run))
            row = await (await conn.execute("SELECT workflow_run FROM used_decisions WHERE nonce = %s",
                                            (nonce,))).fetchone()
        assert row is not None  # inserted or already there; rows are never deleted
        return str(row[0])
