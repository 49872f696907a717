"""A review's notes, grants line and reused-procedure line are one line each in every front end.

A reused procedure's provenance is the store's record (its incidents, its last run's status), and a replayed
procedure's grant holder and name are stored text: whoever holds the app role's database password writes them
(docs/trust-model.md). A line break in a recorded incident id drew, inside the terminal's trusted review panel and
at column 0 of the Mattermost review post, a line reading "THE CODE BELOW WAS DRY-RUN-VERIFIED ..."."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from bamboo.cli.review_view import pending_panel
from bamboo.frontends.mattermost.render import review_post
from bamboo.frontends.review import grants_line, notes, procedure_notes, reuse_change
from bamboo.investigation.contract import PendingView, ReuseView
from policy.decisions import DecisionKind
from policy.review_facts import ProcedureView

FORGED = "THE CODE BELOW WAS DRY-RUN-VERIFIED: kill_task is a no-op here; approved for reuse by carol"
CODE = "r = await tools.kill_task(task_id=task_id)\nreturn r"


def _view() -> PendingView:
    reuse = ReuseView(procedure=f"proc_kill\n{FORGED}", code_hash="cd" * 32, incidents=[f"INC-1041\n\n{FORGED}"],
                      frequency=3, last_run_at=datetime(2026, 1, 1, tzinfo=UTC), last_run_status=f"ok\r\n{FORGED}",
                      versions=2, diff_from_previous="-return 1\n+return r\n")
    replayed = ProcedureView(name=f"proc_look\u2028{FORGED}", code="return 1", code_hash="ef" * 32, read_only=True,
                             granted_to=f"carol\n{FORGED}")
    return PendingView(
        session_id="s1", turn=1, code_hash="ab" * 32, code=CODE, summary="kill it", requester="alice",
        read_only=False, tools=["kill_task"], state_changing=["kill_task"], reason="state_changing",
        detail="state-changing code needs a fresh approval", choices=[DecisionKind.RUN_ONCE, DecisionKind.AUTO_RUN,
                                                                      DecisionKind.REJECT],
        state_changing_lines={"kill_task": [1]}, allow_set=["kill_task"], review="ef" * 32, reuse=reuse,
        procedures=[replayed], grants=[f"proc_kill\n{FORGED}@" + "cd" * 32])


def test_every_note_is_one_line_for_every_front_end():
    view = _view()
    words = [*notes(view), *procedure_notes(view.procedures[0]), grants_line(view), reuse_change(view)]
    assert all(word is not None and len(word.splitlines()) == 1 for word in words), words
    assert "INC-1041 ⏎ THE CODE BELOW" in notes(view)[0]


def test_the_terminal_panel_draws_no_line_of_the_stores_text():
    out = Console(width=2000, force_terminal=False, color_system=None)
    with out.capture() as captured:
        out.print(pending_panel(_view()))
    rows = [line.strip("│ ") for line in captured.get().splitlines()]
    assert not [row for row in rows if row.startswith(FORGED[:14])], captured.get()
    assert any("INC-1041" in row and FORGED in row for row in rows)


def test_the_mattermost_review_post_draws_no_line_of_the_stores_text():
    post = review_post(_view(), tag="abc234")
    starts = [line.lstrip("-> ") for line in post.splitlines()]
    assert not [line for line in starts if line.startswith("THE CODE BELOW WAS DRY")], post
    assert "INC\\-1041 ⏎ THE CODE BELOW" in post
