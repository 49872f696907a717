"""The console's review page words a review as every front end does (``bamboo.frontends.review``): a reused
procedure's provenance line among the facts, and its stored summary labelled as such, not as the model's."""

from __future__ import annotations

from datetime import UTC, datetime

from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.frontends.review import MODEL_SAYS, STORED_SAYS
from bamboo.investigation.contract import ReuseView
from tests.console.test_headers import PASSWORD, SESSION, VIEW, StandInBackend, signed_in

REUSE = ReuseView(procedure="proc__get_task_details", code_hash="ef" * 32, parameters={"task_id": 1},
                  incidents=["inc-1", "inc-2"], frequency=2, last_run_at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
                  last_run_status="ok", matched="what state is the task in")


def _page(tmp_path, view) -> str:
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    backend = StandInBackend()
    backend.review = lambda session_id: _answer(view)  # type: ignore[method-assign]
    app = create_app(backend, ConsoleSettings(_env_file=None), accounts, "test-cookie-secret-" + "x" * 24)
    answer = signed_in(app).get(f"/sessions/{SESSION}/review")
    assert answer.status_code == 200, answer.text
    return answer.text


async def _answer(view):
    return view


def test_a_reused_procedure_shows_where_it_came_from_and_whose_summary_it_is(tmp_path) -> None:
    page = _page(tmp_path, VIEW.model_copy(update={"reuse": REUSE}))
    assert "reusing procedure proc__get_task_details; the store records it captured from inc-1, inc-2 (2 time(s)), last run " \
           "2026-11-30T09:00:00+00:00 (ok)" in page
    assert STORED_SAYS.rstrip(":").replace("'", "&#39;") in page and MODEL_SAYS.rstrip(":") not in page
    assert "near what it was captured for: what state is the task in" in page


def test_new_code_is_still_the_models_words(tmp_path) -> None:
    page = _page(tmp_path, VIEW)
    assert MODEL_SAYS.rstrip(":") in page and "reusing procedure" not in page
