"""The operator API every front end shares: one parser of operator lines, one wording of a review (whose words
a summary is, where a reused procedure came from), and no signal, update or query named outside the contract."""

from __future__ import annotations

import ast
import io
import re
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from bamboo.frontends.mattermost.commands import parse_thread
from bamboo.frontends.mattermost.render import review_post
from bamboo.frontends.operator_lines import parse_line
from bamboo.frontends.review import CHOICE_WORDS, MODEL_SAYS, STORED_SAYS, notes, said
from bamboo.investigation.contract import Message, PendingView, Query, ReuseView
from policy.decisions import ALL_CHOICES, DecisionKind

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = [ROOT / "bamboo" / "investigation" / "client.py", ROOT / "bamboo" / "cli" / "investigate_cmd.py",
           ROOT / "bamboo" / "cli" / "demo_loop.py", ROOT / "bamboo" / "cli" / "review_view.py",
           *sorted((ROOT / "bamboo" / "frontends").rglob("*.py"))]
CODE = "t = await tools.get_task_details(task_id=task_id)\nreturn {'status': t['status']}"


def _view(reuse: ReuseView | None = None) -> PendingView:
    return PendingView(session_id="s", turn=2, code_hash="cd" * 32, code=CODE, summary="reads the task's status",
                       trigger_signals=["status asked"], requester="alice", read_only=True,
                       tools=["get_task_details"], reason="new_code", detail="New code is always reviewed.",
                       choices=list(ALL_CHOICES), reuse=reuse)


REUSE = ReuseView(procedure="proc__get_task_details", code_hash="ef" * 32, parameters={"task_id": 40112233},
                  incidents=["inc-1", "inc-2"], frequency=2, last_run_at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
                  last_run_status="ok", matched="what state is the task in", summary="reads the task's status")


# ------------------------------------------------------------------ one parser of operator lines
def test_operator_lines_mean_the_same_everywhere() -> None:
    fresh = parse_line("/new what state is it in?")
    assert (fresh.kind, fresh.text, fresh.fresh_code, fresh.force_tool) == ("message", "what state is it in?",
                                                                            True, True)
    listing = parse_line("/codify")
    assert (listing.kind, listing.codify, listing.text) == ("message", "", "/codify")
    by_number, by_name = parse_line("/codify 2"), parse_line("/codify  Check scout maxPSS ")
    assert (by_number.codify, by_number.text) == ("2", "/codify 2")
    assert (by_name.codify, by_name.text) == ("Check scout maxPSS", "/codify  Check scout maxPSS")
    assert parse_line("/tool look").force_tool and not parse_line("/tool look").fresh_code
    plain = parse_line("why did it fail?")
    assert (plain.kind, plain.text, plain.codify, plain.fresh_code) == ("message", "why did it fail?", None, False)
    assert (parse_line("/revoke all").kind, parse_line("/revoke all").target) == ("revoke", "all")
    assert (parse_line("/abandon not ours").kind, parse_line("/abandon not ours").reason) == ("abandon", "not ours")
    assert parse_line("/new").kind == parse_line("/bogus").kind == "invalid"
    message = parse_line("/codify 2").message_for("bob")
    assert message.codify == "2" and message.text == "/codify 2" and message.signed_body()["codify"] == "2"


def test_the_bot_reads_operator_lines_with_the_shared_parser() -> None:
    codify = parse_thread("!codify 3")
    assert (codify.kind, codify.codify, codify.text) == ("message", "3", "!codify 3")
    fresh = parse_thread("/new check again")
    assert (fresh.kind, fresh.fresh_code, fresh.force_tool, fresh.text) == ("message", True, True, "check again")
    assert parse_thread("/codify").codify == ""
    assert parse_thread("/finalize").kind == "invalid"
    assert parse_thread("what now?").text == "what now?"


# ------------------------------------------------------------------ one wording of a review
def test_a_reused_procedures_summary_is_labelled_as_stored_not_as_the_models() -> None:
    assert said(_view()).label == MODEL_SAYS
    reused = said(_view(REUSE))
    assert reused.label == STORED_SAYS and "captured" in STORED_SAYS
    assert "near what it was captured for: what state is the task in" in reused.words
    assert notes(_view(REUSE))[0] == REUSE.provenance_line()
    assert notes(_view(REUSE))[0].startswith("reusing procedure proc__get_task_details; the store records it captured from inc-1, inc-2")
    assert CHOICE_WORDS[DecisionKind.RUN_ONCE] == "run once"


def test_the_bot_shows_where_a_reused_procedure_came_from() -> None:
    post = review_post(_view(REUSE), tag="abc234")
    line = next(row for row in post.splitlines() if "reusing procedure" in row)  # inert Markdown: escaped
    assert line.startswith("- reusing procedure proc") and "captured from inc" in line and "last run 2026" in line
    assert "no model call wrote this code" in line
    assert f"**{STORED_SAYS}**" in post and MODEL_SAYS not in post
    assert MODEL_SAYS in review_post(_view(), tag="abc234")


def test_the_terminal_shows_where_a_reused_procedure_came_from(monkeypatch) -> None:
    from bamboo.cli import investigate_cmd

    out = io.StringIO()
    monkeypatch.setattr(investigate_cmd, "console", Console(file=out, width=200, color_system=None))
    investigate_cmd.show_pending(_view(REUSE))
    shown = out.getvalue()
    assert STORED_SAYS in shown and MODEL_SAYS not in shown
    assert "reusing procedure proc__get_task_details; the store records it captured from inc-1, inc-2" in shown
    assert "y = run once" in shown


# ------------------------------------------------------------------ names only from the contract
def test_no_client_names_a_signal_update_or_query_itself() -> None:
    """Every ``.signal``/``.execute_update``/``.start_update``/``.query`` of a session names a contract member,
    never a string of its own (a rename in one place would orphan the others)."""
    names = {m.value for m in Message} | {q.value for q in Query}
    found = []
    for path in CLIENTS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                    and node.func.attr in ("signal", "execute_update", "start_update", "query", "update", "sign") \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value in names
                                                  and isinstance(node.func, ast.Attribute)
                                                  and node.func.attr in ("update", "signal", "deliver")
                                                  for a in node.args[1:3]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_the_workflow_declares_its_handlers_by_the_contracts_names() -> None:
    source = (ROOT / "workflows" / "investigation.py").read_text()
    assert not re.findall(r"@workflow\.(?:signal|update|query)\(name=\"", source)
    assert not re.findall(r"@workflow\.query\s*\n", source)
