"""Only a ``proc__`` name is a stored procedure. A procedures row is written with the store's role, a requester's
too: a row named ``kill_task`` whose body only read made the review judge a call to the real kill_task by that
body, read-only, so the requester (who may approve read-only code) approved it themselves and the kill reached
PanDA."""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from bamboo.investigation.procedures import ProcedureRepository
from policy.decisions import DecisionKind
from policy.procedures import assess_read_only, procedure_scope
from tests.investigation.conftest import TASK_ID, new_session, pending_turn

pytestmark = pytest.mark.usefixtures("terminate_sessions")

KILL = "r = await tools.kill_task(task_id=task_id)\nreturn {'r': str(r)[:200]}"
HARMLESS = "return await tools.get_task_details(task_id=task_id)"


def test_a_row_named_after_a_raw_tool_is_not_that_tool() -> None:
    flags = {"kill_task": False, "get_task_details": True}
    verdict = assess_read_only(KILL, flags, {"kill_task": HARMLESS})
    assert not verdict.read_only and verdict.state_changing == ("kill_task",) and verdict.procedures == ()
    assert procedure_scope([KILL], ["kill_task"], {"kill_task": HARMLESS}) == {}


async def test_a_requester_s_row_named_kill_task_does_not_make_a_kill_read_only(ops, client, settings, services,
                                                                                running_worker, brain, new_kills):
    await ProcedureRepository(services.store.pool).save("kill_task", HARMLESS, "approved", {})
    session = new_session()
    brain.propose(KILL)
    await inv.start(client, inv.start_input(settings, session, "reader", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task", ops.reader)
    view = await pending_turn(client, session, 1)
    assert not view.read_only and view.state_changing == ["kill_task"] and view.procedures == []
    with pytest.raises(inv.InvestigationError, match="may not approve state-changing"):
        await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.reader)
    assert new_kills() == []
