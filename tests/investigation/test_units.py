"""Small pure pieces: decision parsing, the task preamble, which runs become procedures, exposure."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bamboo.investigation.client import InvestigationError, parse_decision
from bamboo.investigation.code import with_task_preamble
from bamboo.investigation.finalize import procedure_runs
from bamboo.investigation.procedure_tools import exposed_procedures
from bamboo.investigation.contract import CapturedRun
from bamboo.tools.model import ToolSpec
from policy.decisions import DecisionKind
from tests.investigation.conftest import KILL_PROC, KILL_PROC_CODE, READ_PROC, READ_PROC_CODE


def test_decisions_accept_the_prompt_letters_and_words():
    assert parse_decision("y") is DecisionKind.RUN_ONCE and parse_decision("A") is DecisionKind.AUTO_RUN
    assert parse_decision("k") is DecisionKind.ALWAYS_ASK and parse_decision("N") is DecisionKind.REJECT
    assert parse_decision("edit") is DecisionKind.EDIT
    with pytest.raises(InvestigationError, match="unknown decision"):
        parse_decision("maybe")


def test_preamble_only_ever_sets_an_integer_or_none():
    assert with_task_preamble("return {}", 7) == "task_id = 7\nreturn {}"
    assert with_task_preamble("return {}", None) == "task_id = None\nreturn {}"
    with pytest.raises((TypeError, ValueError)):
        with_task_preamble("return {}", "1; import os")  # type: ignore[arg-type]


def _run(turn: int, tools: list[str], ok: bool = True) -> CapturedRun:
    return CapturedRun(turn=turn, code=f"# {turn}", code_hash=str(turn), tools=tools, summary="s",
                       executed_at=datetime(2026, 1, 1, tzinfo=timezone.utc), approved_by="bob", ok=ok)


def test_procedures_come_from_successful_runs_that_call_raw_tools():
    runs = procedure_runs([_run(1, ["get_task_details"]), _run(2, ["get_task_details"]), _run(3, [READ_PROC]),
                           _run(4, ["a", "b"], ok=False), _run(5, [])])
    assert {name: run.turn for name, run in runs.items()} == {"proc__get_task_details": 2}


def test_only_read_only_multi_tool_procedures_are_exposed_unless_mutating_autorun():
    specs = [ToolSpec(name="get_task_details", read_only=True), ToolSpec(name="get_task_jobs_summary", read_only=True),
             ToolSpec(name="kill_task", read_only=False)]
    code = {READ_PROC: READ_PROC_CODE, KILL_PROC: KILL_PROC_CODE,
            "proc__get_task_details": "return await tools.get_task_details(task_id=task_id)"}
    assert exposed_procedures(specs, code, allow_mutating_autorun=False) == [READ_PROC]
    assert exposed_procedures(specs, code, allow_mutating_autorun=True) == sorted([KILL_PROC, READ_PROC])
