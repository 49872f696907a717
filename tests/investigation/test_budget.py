"""Spend limits on an investigation: the scripted model reports token usage, the worker prices it with the
deployment's table, and the workflow stops calling the model once the turn's or the session's budget is spent
(a post-call stop-loss). The spend is in the result, the ``spend`` query and the ``BambooSpendUsd`` search
attribute."""

from __future__ import annotations

import pytest

from bamboo.contract import SPEND_USD
from bamboo.investigation import client as inv
from bamboo.models.spend import ModelPrice, Spend
from tests.investigation.conftest import READ_CODE, TASK_ID, entries, new_session, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")

# One dollar per token: any call costs far more than the budgets below, so each crosses them at once.
DEAR = ModelPrice(input_per_mtok=1_000_000, output_per_mtok=1_000_000)


@pytest.fixture
def settings(settings, request):
    """The investigation settings with the deployment's prices and the budget the test names."""
    return settings.model_copy(update={"llm_prices": {settings.llm_model: DEAR}, **getattr(request, "param", {})})


async def _spend(client, session) -> Spend:
    return await inv.handle(client, session).query("spend", result_type=Spend)


async def _budget_entries(client, session, count):
    async def probe():
        found = await entries(client, session, "budget")
        return found if len(found) >= count else None
    return await wait_for(probe)


@pytest.mark.parametrize("settings", [{"budget_session_usd": 0.5}], indirect=True)
async def test_a_spent_session_budget_stops_every_further_model_call(
        ops, client, settings, running_worker, brain, llm_server):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    before = llm_server.call_count
    await inv.send_message(client, session, "what is the status?", ops.alice)
    [stop] = await _budget_entries(client, session, 1)
    assert "session's model budget is spent" in stop.text and stop.turn == 1
    assert llm_server.call_count - before == 1  # the intent call crossed the budget; no code was generated

    await inv.send_message(client, session, "and now?", ops.alice)
    await _budget_entries(client, session, 2)
    assert llm_server.call_count - before == 1  # a later turn starts no model call at all
    assert await inv.pending(client, session) is None

    spent = await _spend(client, session)
    assert spent.calls == 1 and spent.usd > 0.5 and spent.prompt_tokens > 0
    assert spent.budget.session_usd == 0.5
    described = await inv.handle(client, session).describe()
    assert described.typed_search_attributes.get(SPEND_USD) == pytest.approx(spent.usd)

    await inv.abandon(client, session, ops.alice, "budget test")
    result = await inv.handle(client, session).result()
    assert result.spend == spent


@pytest.mark.parametrize("settings", [{"budget_run_usd": 0.5}], indirect=True)
async def test_a_turn_budget_stops_that_turn_and_the_next_turn_starts_afresh(
        ops, client, settings, running_worker, brain, llm_server):
    session = new_session()
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    before = llm_server.call_count
    await inv.send_message(client, session, "first question", ops.alice)
    await _budget_entries(client, session, 1)
    await inv.send_message(client, session, "second question", ops.alice)
    stops = await _budget_entries(client, session, 2)
    assert [s.turn for s in stops] == [1, 2] and all("turn's model budget is spent" in s.text for s in stops)
    assert llm_server.call_count - before == 2  # one call per turn, then that turn stopped
    assert (await _spend(client, session)).calls == 2


def test_a_budget_without_a_price_for_the_model_is_refused():
    from bamboo.settings import Settings

    with pytest.raises(ValueError, match="no price for the model 'gpt-x'"):
        Settings(llm_model="gpt-x", budget_session_usd=1.0)
    assert Settings(llm_model="local", budget_session_usd=1.0).budget().session_usd == 1.0  # the local model is free
