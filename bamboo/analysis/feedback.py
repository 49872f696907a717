"""Operator feedback on a diagnosis: the only thing analysis ever writes, into its own table.

A confirmation (or a correction naming the true cause) decides the same task's next analysis, adds to
that cause's frequency in the ranking, and — when the verdict carries the task's clues — counts as one
more incident linking those clues to that cause, so similar tasks rank it higher too. The share of
confirmed proposals is the cause's resolution success rate. Stored counts in
edge_provenance stay what the incidents said; verdicts are counted on top of them, from this table (an
earlier version accepted feedback and discarded it).
"""

from __future__ import annotations

import difflib

from psycopg_pool import AsyncConnectionPool

from bamboo.analysis.contract import Feedback, FeedbackReceipt, OperatorVerdict
from bamboo.analysis.queries import cause_names, cause_stats, find_cause_name


class UnknownCause(ValueError):
    """The feedback names a cause the knowledge base does not have; the message lists the closest ones."""


async def record_feedback(pool: AsyncConnectionPool, feedback: Feedback, *, new_cause: bool = False) -> FeedbackReceipt:
    """Store (or replace) the verdict for one task, naming causes as the knowledge base names them.

    A cause the knowledge base does not know is refused unless ``new_cause`` says it is meant as a new
    one: a correction typed in a record's wording instead of the stored label would otherwise be filed
    under a cause nothing is linked to, and change nothing."""
    known = await find_cause_name(pool, feedback.cause)
    if known is None and not new_cause:
        names = await cause_names(pool)
        closest = difflib.get_close_matches(feedback.cause.strip(), names, n=3, cutoff=0.3) or names[:3]
        hint = f"; closest known: {'; '.join(closest)}" if closest else "; the knowledge base has no causes yet"
        raise UnknownCause(f"the knowledge base has no cause {feedback.cause.strip()!r}{hint} "
                           "(pass --new-cause to record it as a new cause)")
    cause = known or feedback.cause.strip()
    proposed = feedback.proposed_cause
    if feedback.verdict == "correct" and proposed is None:
        proposed = cause
    if proposed:
        proposed = await find_cause_name(pool, proposed) or proposed.strip()
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO analysis_feedback (task_id, verdict, cause, proposed_cause, operator, clues) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (task_id) DO UPDATE SET verdict = EXCLUDED.verdict, "
            "cause = EXCLUDED.cause, proposed_cause = EXCLUDED.proposed_cause, operator = EXCLUDED.operator, "
            "clues = CASE WHEN cardinality(EXCLUDED.clues) > 0 THEN EXCLUDED.clues ELSE analysis_feedback.clues END, "
            "created_at = now()",
            (feedback.task_id, feedback.verdict, cause, proposed, feedback.operator, sorted(set(feedback.clues))),
        )
    stats = (await cause_stats(pool, [cause]))[cause]
    return FeedbackReceipt(task_id=feedback.task_id, verdict=feedback.verdict, cause=cause,
                           matched_known_cause=known is not None,
                           cause_frequency=stats.incidents + stats.confirmations,
                           cause_confirmations=stats.confirmations, clues=len(set(feedback.clues)))


async def operator_verdict(pool: AsyncConnectionPool, task_id: int | None) -> tuple[str, OperatorVerdict] | None:
    """The cause an operator gave for this very task and whether it confirmed or corrected the analysis.

    Which of the two it was is what a reader must be told: a correction is the operator's decision against
    the analysis, and was shown as "an operator confirmed" when the corrected cause had since risen to the top."""
    if task_id is None:
        return None
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT cause, verdict FROM analysis_feedback WHERE task_id = %s",
                                        (task_id,))).fetchone()
    if row is None:
        return None
    return row[0], "confirmed" if row[1] == "correct" else "corrected"
