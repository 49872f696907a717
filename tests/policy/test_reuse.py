"""Reuse before regenerate, as pure policy: which stored procedure fits a turn, the code it is proposed as, and
when a reused procedure's durable grant lets it run unprompted (issue 26)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash, logic_hash
from policy.decisions import STATE_CHANGING_CHOICES
from policy.grants import make_grant
from policy.phases import Phase
from policy.reuse import (
    ProcedureCandidate, ReusedCode, ReuseSettings, TaskFacts, bind, choose_procedure, is_bound_body,
    needed_parameters,
)
from policy.review import CodeVerdict, ReviewReason, ReviewRequest, decide_review

AT = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
READ = "proc__get_task__get_jobs"
READ_BODY = "t = await tools.get_task(task_id=task_id)\nj = await tools.get_jobs(task_id=task_id)\nreturn {'n': len(j)}"
KILL = "proc__get_task__kill_task"
KILL_BODY = "t = await tools.get_task(task_id=task_id)\nawait tools.kill_task(task_id=task_id)\nreturn {}"
SITE = "proc__get_site"
SITE_BODY = "return await tools.get_site(name=site)"
RAW = [ToolFacts(name="get_task", read_only=True), ToolFacts(name="get_jobs", read_only=True),
       ToolFacts(name="get_site", read_only=True), ToolFacts(name="kill_task", read_only=False)]
TASK = TaskFacts(clues=("InsufficientMemory", "TaskStatusBroken"), parameters={"task_id": 42})


def catalog(procedures: dict[str, str], raw=RAW) -> ToolCatalog:
    return ToolCatalog.build([*raw, *(ToolFacts(name=n, origin="procedure") for n in procedures)], procedures)


def candidate(name: str, body: str, similarity: float = 0.9, **extra) -> ProcedureCandidate:
    return ProcedureCandidate(name=name, code=body, code_hash=code_hash(body), similarity=similarity, **extra)


def test_the_nearest_fitting_procedure_is_proposed_bound_to_the_task():
    procedures = {READ: READ_BODY, KILL: KILL_BODY}
    outcome = choose_procedure([candidate(READ, READ_BODY, 0.7), candidate(KILL, KILL_BODY, 0.9)],
                               catalog(procedures), TASK, None, ReuseSettings())
    assert outcome.chosen is not None and outcome.chosen.candidate.name == KILL
    assert outcome.chosen.code == f"# reuses {KILL}, bound for this task:\ntask_id = 42\n{KILL_BODY}"
    assert outcome.chosen.reused == ReusedCode(procedure=KILL, parameters={"task_id": 42})
    assert not outcome.chosen.read_only


def test_a_state_changing_procedure_needs_a_nearer_request_than_a_read_only_one():
    procedures = {READ: READ_BODY, KILL: KILL_BODY}
    outcome = choose_procedure([candidate(READ, READ_BODY, 0.62), candidate(KILL, KILL_BODY, 0.7)],
                               catalog(procedures), TASK, None, ReuseSettings(threshold=0.6, state_changing_threshold=0.8))
    assert outcome.chosen is not None and outcome.chosen.candidate.name == READ
    assert [u.name for u in outcome.unfit] == [KILL] and "0.70 < 0.80" in outcome.unfit[0].reason


def test_a_procedure_calling_a_tool_that_is_gone_does_not_fit():
    procedures = {READ: READ_BODY}
    without_jobs = [t for t in RAW if t.name != "get_jobs"]
    outcome = choose_procedure([candidate(READ, READ_BODY)], catalog(procedures, without_jobs), TASK, None,
                               ReuseSettings())
    assert outcome.chosen is None and "calls get_jobs, which the catalogue does not offer now" in outcome.unfit[0].reason


def test_a_procedure_captured_for_another_cause_does_not_fit_and_the_same_cause_ranks_first():
    procedures = {READ: READ_BODY, KILL: KILL_BODY}
    other = candidate(READ, READ_BODY, 0.95, causes=("Site in scheduled downtime",))
    same = candidate(KILL, KILL_BODY, 0.85, causes=("insufficient MEMORY request",))
    outcome = choose_procedure([other, same], catalog(procedures), TASK, "Insufficient memory request",
                               ReuseSettings())
    assert outcome.chosen is not None and outcome.chosen.candidate.name == KILL and outcome.chosen.cause_matched
    assert "not for Insufficient memory request" in outcome.unfit[0].reason
    anything = choose_procedure([other], catalog(procedures), TASK, None, ReuseSettings())
    assert anything.chosen is not None  # without a chosen cause, the recorded one does not exclude it


def test_a_changed_body_or_an_unknown_parameter_does_not_fit():
    procedures = {READ: READ_BODY + "\n# changed", SITE: SITE_BODY}
    outcome = choose_procedure([candidate(READ, READ_BODY), candidate(SITE, SITE_BODY)], catalog(procedures), TASK,
                               None, ReuseSettings())
    assert outcome.chosen is None
    reasons = {u.name: u.reason for u in outcome.unfit}
    assert "not an approved procedure with this body" in reasons[READ] and "needs site" in reasons[SITE]
    with_site = TaskFacts(parameters={"task_id": 42, "site": "CERN-PROD"})
    chosen = choose_procedure([candidate(SITE, SITE_BODY)], catalog(procedures), with_site, None, ReuseSettings()).chosen
    assert chosen is not None and "site = 'CERN-PROD'" in chosen.code and "task_id" not in chosen.code


def test_only_plain_values_are_bound():
    assert needed_parameters("x = site\nreturn await tools.get(task_id=task_id)") == ("task_id", "site")
    assert needed_parameters("task_id = 3\nreturn task_id") == ()
    for value in ("CERN'; await tools.kill_task(task_id=1) #", "a b", "", "\x1b[2J"):
        with pytest.raises(ValueError):
            bind(SITE, SITE_BODY, {"site": value})
    with pytest.raises(ValueError):
        bind(READ, READ_BODY, {"task_id": True})


def test_equivalent_code_shares_a_logic_hash_and_different_code_does_not():
    formatted = "t = await tools.get_task(task_id = task_id)   # the task\n\nj = await tools.get_jobs(task_id=task_id)\n" \
                "return {'n': len(j)}"
    assert logic_hash(formatted) == logic_hash(READ_BODY) and code_hash(formatted) != code_hash(READ_BODY)
    assert logic_hash(READ_BODY.replace("len(j)", "len(j) + 0")) != logic_hash(READ_BODY)


def _reuse_request(body: str, stored: str, granted: str | None, grant_name: str = READ) -> ReviewRequest:
    procedures = {grant_name: stored}
    grants = {grant_name: make_grant(grant_name, {grant_name: granted}, "bob", AT)} if granted else {}
    reused = ReusedCode(procedure=grant_name, parameters={"task_id": 42})
    return ReviewRequest(phase=Phase.INTERACTIVE, code=bind(grant_name, body, {"task_id": 42}),
                         catalog=catalog(procedures), grants=grants, reused=reused)


def test_a_reused_read_only_procedure_carries_its_durable_grant_and_nothing_else_does():
    ran = decide_review(_reuse_request(READ_BODY, READ_BODY, READ_BODY))
    assert ran.outcome is CodeVerdict.RUN and ran.reason is ReviewReason.DURABLE_GRANT
    assert ran.allow_set == ("get_jobs", "get_task")

    ungranted = decide_review(_reuse_request(READ_BODY, READ_BODY, None))
    assert ungranted.outcome is CodeVerdict.ASK and ungranted.reason is ReviewReason.NEW_CODE

    changed = READ_BODY.replace("len(j)", "len(j) + 0")
    stale = decide_review(_reuse_request(changed, changed, READ_BODY))
    assert stale.outcome is CodeVerdict.ASK and stale.reason is ReviewReason.DURABLE_GRANT_CODE_CHANGED

    edited = _reuse_request(READ_BODY, READ_BODY, READ_BODY)
    edited = edited.model_copy(update={"code": edited.code + "\nawait tools.get_site(name='x')"})
    assert decide_review(edited).reason is ReviewReason.DURABLE_GRANT_MIXED


def test_a_reused_state_changing_procedure_is_never_covered_by_a_grant():
    decision = decide_review(_reuse_request(KILL_BODY, KILL_BODY, KILL_BODY, KILL))
    assert decision.outcome is CodeVerdict.ASK and decision.reason is ReviewReason.DURABLE_GRANT_STATE_CHANGING
    assert decision.choices == STATE_CHANGING_CHOICES


def test_the_bound_body_check_reads_the_current_stored_code():
    reused = ReusedCode(procedure=READ, parameters={"task_id": 42})
    code = bind(READ, READ_BODY, {"task_id": 42})
    assert is_bound_body(code, reused, {READ: READ_BODY})
    assert not is_bound_body(code, reused, {READ: READ_BODY + "\nreturn 1"})
    assert not is_bound_body(code, reused.model_copy(update={"parameters": {"task_id": 43}}), {READ: READ_BODY})


def test_a_procedure_whose_tools_fit_the_request_worse_than_another_tool_is_not_proposed():
    """A request about a site is not answered by the task-and-jobs procedure, however near its wording."""
    procedures = {READ: READ_BODY}
    about_the_site = {"get_task": 0.40, "get_jobs": 0.38, "get_site": 0.71, "kill_task": 0.2}
    outcome = choose_procedure([candidate(READ, READ_BODY, 0.72)], catalog(procedures), TASK, None,
                               ReuseSettings(), about_the_site)
    assert outcome.chosen is None
    assert outcome.unfit[0].reason == "calls none of what the request is about (get_site fits it better than its own tools)"
    close_call = {**about_the_site, "get_site": 0.44}  # within the margin: the procedure's tools are as good
    assert choose_procedure([candidate(READ, READ_BODY, 0.72)], catalog(procedures), TASK, None,
                            ReuseSettings(), close_call).chosen is not None
    verbatim = choose_procedure([candidate(READ, READ_BODY, 0.97)], catalog(procedures), TASK, None,
                                ReuseSettings(), about_the_site)
    assert verbatim.chosen is not None  # what it was captured for: the tool check does not apply
    assert choose_procedure([candidate(READ, READ_BODY, 0.72)], catalog(procedures), TASK, None,
                            ReuseSettings(), {}).chosen is not None  # no fit figures: nothing to compare


def test_procedures_too_far_from_the_request_are_counted_not_denied():
    """The reuse step hands on only the procedures near the request; the transcript still says the others exist."""
    from policy.reuse import Unfit, describe_unfit

    assert describe_unfit([], 0) == "no approved procedure is stored"
    assert describe_unfit([], 3) == "3 approved procedures are not near the request"
    assert describe_unfit([Unfit(name="proc__a", reason="calls no tool")], 1) == \
        "proc__a calls no tool; 1 approved procedure is not near the request"
