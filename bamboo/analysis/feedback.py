"""Operator feedback on a diagnosis: the only thing analysis ever writes, into its own table.

A confirmation (or a correction naming the true cause) adds to that cause's frequency in the ranking,
and the share of confirmed proposals is the cause's resolution success rate. Stored counts in
edge_provenance stay what the incidents said (upstream defect #14: feedback was discarded).
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from bamboo.analysis.contract import Feedback, FeedbackReceipt
from bamboo.analysis.queries import cause_stats, find_cause_name


async def record_feedback(pool: AsyncConnectionPool, feedback: Feedback) -> FeedbackReceipt:
    """Store (or replace) the verdict for one task, naming causes as the knowledge base names them."""
    known = await find_cause_name(pool, feedback.cause)
    cause = known or feedback.cause.strip()
    proposed = feedback.proposed_cause
    if feedback.verdict == "correct" and proposed is None:
        proposed = cause
    if proposed:
        proposed = await find_cause_name(pool, proposed) or proposed.strip()
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO analysis_feedback (task_id, verdict, cause, proposed_cause, operator) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (task_id) DO UPDATE SET verdict = EXCLUDED.verdict, "
            "cause = EXCLUDED.cause, proposed_cause = EXCLUDED.proposed_cause, operator = EXCLUDED.operator, "
            "created_at = now()",
            (feedback.task_id, feedback.verdict, cause, proposed, feedback.operator),
        )
    stats = (await cause_stats(pool, [cause]))[cause]
    return FeedbackReceipt(task_id=feedback.task_id, verdict=feedback.verdict, cause=cause,
                           matched_known_cause=known is not None,
                           cause_frequency=stats.incidents + stats.confirmations,
                           cause_confirmations=stats.confirmations)
