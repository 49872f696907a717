"""The review decision over every combination of phase x session policy x grant x read-only-ness, checked
against the rules written out as a separate oracle, plus invariants that must hold in every cell and the
scenarios the issues name.

The rules are docs/trust-model.md's, including its tightening: state-changing (or unanalysable) code is never run without a
fresh answer. Session auto-run and durable grants cover read-only code only, auto-run is not offered for
anything else, and an approved run's allow-set is the tools its review showed."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest

from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash
from policy.decisions import ALL_CHOICES, ALWAYS_ASK_CHOICES, STATE_CHANGING_CHOICES
from policy.grants import CodePolicy, ProcedureGrant, SessionPolicy, make_grant, make_session_policy
from policy.phases import Phase
from policy.review import ReviewDecision, CodeVerdict, ReviewReason, ReviewRequest, decide_review

AT = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
# A deployment that takes unsigned answers from anyone: whoever chose a session auto-run may still approve.
OPEN = DeploymentPolicy(rules=ApprovalRules(require_signatures=False))
P = "proc__p"
RAW_TOOLS = [
    ToolFacts(name="get_task", read_only=True),
    ToolFacts(name="get_jobs", read_only=True, origin="external"),
    ToolFacts(name="kill_task", read_only=False),
    ToolFacts(name="ask_operator", read_only=True, requires_interaction=True),
]
INTERACTIVE_SET = ("get_jobs", "get_task", "kill_task", P)
# The tools each cell's turn is shown to reach: what an approved run of it may call.
SHOWN = {
    ("raw_tools", "read_only"): ("get_task",),
    ("raw_tools", "state_changing"): ("get_task", "kill_task"),
    ("granted_plus_raw", "read_only"): ("get_jobs", P),
    ("granted_plus_raw", "state_changing"): ("kill_task", P),
}

PROCEDURE_CODE = {
    "read_only": "await tools.get_task()\nawait tools.get_jobs()",
    "state_changing": "await tools.get_task()\nawait tools.kill_task()",
    "opaque": "await tools.get_task()\nawait getattr(tools, chosen)()",
}
EXTRA_CALL = {
    "read_only": "await tools.get_jobs()",
    "state_changing": "m = tools.kill_task\nawait m()",
    "opaque": "await getattr(tools, chosen)()",
}
RAW_TURN = {
    "read_only": "await tools.get_task(1)",
    "state_changing": "await tools.get_task(1)\nawait tools.kill_task(1)",
    "opaque": "await getattr(tools, chosen)(1)",
}

PHASES = tuple(Phase)
POLICIES = ("none", "auto_run", "always_ask", "auto_run_other_code")
GRANTS = ("raw_tools", "procedure_ungranted", "procedure_granted", "procedure_grant_stale", "granted_plus_raw")
READ_ONLY = ("read_only", "state_changing", "opaque")


def shown(grant: str, read_only: str) -> tuple[str, ...]:
    if grant in ("raw_tools", "granted_plus_raw"):
        return INTERACTIVE_SET if read_only == "opaque" else SHOWN[(grant, read_only)]
    return (P,)  # the turn itself only calls the procedure; its replay has an allow-set of its own


def build_request(phase: Phase, policy: str, grant: str, read_only: str) -> ReviewRequest:
    if grant == "raw_tools":
        turn, procedure = RAW_TURN[read_only], PROCEDURE_CODE["read_only"]
    elif grant == "granted_plus_raw":
        turn, procedure = f"await tools.{P}()\n{EXTRA_CALL[read_only]}", PROCEDURE_CODE["read_only"]
    else:
        turn, procedure = f"result = await tools.{P}()\nprint(result)", PROCEDURE_CODE[read_only]
    procedure_code = {P: procedure}
    catalog = ToolCatalog.build([*RAW_TOOLS, ToolFacts(name=P, read_only=True, origin="procedure")], procedure_code)
    grants: dict[str, ProcedureGrant] = {}
    if grant in ("procedure_granted", "granted_plus_raw"):
        grants[P] = make_grant(P, procedure_code, "granter", AT)
    elif grant == "procedure_grant_stale":
        grants[P] = make_grant(P, {P: procedure + "\n# the version that was granted"}, "granter", AT)
    policies: dict[str, SessionPolicy] = {}
    if policy in ("auto_run", "always_ask"):
        key, entry = make_session_policy(turn, CodePolicy(policy), procedure_code, "approver")
        policies[key] = entry
    elif policy == "auto_run_other_code":
        key, entry = make_session_policy(turn + "\nprint('other')", CodePolicy.AUTO_RUN, procedure_code, "approver")
        policies[key] = entry
    return ReviewRequest(
        phase=phase,
        code=turn,
        catalog=catalog,
        session_policies=policies,
        grants=grants,
        policy=OPEN,
    )


def oracle(phase: Phase, policy: str, grant: str, read_only: str):
    """The rules, written independently of the implementation: (outcome, reason, allow-set, choices)."""
    if phase is Phase.AUTOMATIC:
        if read_only == "read_only":
            # Every read-only cell stores read-only code for P, so P is bridged alongside the read-only tools.
            return CodeVerdict.RUN, ReviewReason.AUTOMATIC_READ_ONLY, ("get_jobs", "get_task", P), ()
        if read_only == "opaque":
            return CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_OPAQUE, (), ()
        return CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_STATE_CHANGING, (), ()

    allow = shown(grant, read_only)
    choices = ALL_CHOICES if read_only == "read_only" else STATE_CHANGING_CHOICES
    if policy == "always_ask":
        return CodeVerdict.ASK, ReviewReason.SESSION_ALWAYS_ASK, allow, ALWAYS_ASK_CHOICES
    if grant == "procedure_granted" and read_only == "read_only":
        return CodeVerdict.RUN, ReviewReason.DURABLE_GRANT, (P,), ()
    if policy == "auto_run":
        if read_only != "read_only":
            return CodeVerdict.ASK, ReviewReason.SESSION_AUTO_RUN_STATE_CHANGING, allow, choices
        return CodeVerdict.RUN, ReviewReason.SESSION_AUTO_RUN, allow, ()
    if grant == "procedure_grant_stale":
        reason = ReviewReason.DURABLE_GRANT_CODE_CHANGED
    elif grant in ("procedure_granted", "granted_plus_raw") and read_only == "opaque":
        reason = ReviewReason.DURABLE_GRANT_OPAQUE
    elif grant == "procedure_granted":
        reason = ReviewReason.DURABLE_GRANT_STATE_CHANGING
    elif grant == "granted_plus_raw":
        reason = ReviewReason.DURABLE_GRANT_MIXED
    else:
        reason = ReviewReason.NEW_CODE
    return CodeVerdict.ASK, reason, allow, choices


CELLS = list(itertools.product(PHASES, POLICIES, GRANTS, READ_ONLY))


def test_the_table_covers_every_combination() -> None:
    assert len(CELLS) == 2 * 4 * 5 * 3


@pytest.mark.parametrize(("phase", "policy", "grant", "read_only"), CELLS)
def test_review_table(phase: Phase, policy: str, grant: str, read_only: str) -> None:
    decision = decide_review(build_request(phase, policy, grant, read_only))
    outcome, reason, allow_set, choices = oracle(phase, policy, grant, read_only)
    assert (decision.outcome, decision.reason) == (outcome, reason), decision.detail
    assert decision.allow_set == tuple(sorted(allow_set))
    assert decision.choices == choices
    assert decision.read_only is (read_only == "read_only")
    assert decision.detail
    _check_invariants(decision, phase, read_only)


def _check_invariants(decision: ReviewDecision, phase: Phase, read_only: str) -> None:
    if decision.outcome is CodeVerdict.REFUSE:
        assert decision.allow_set == ()
    if phase is Phase.AUTOMATIC:
        assert decision.outcome is not CodeVerdict.ASK  # nobody is there to answer
        assert "kill_task" not in decision.allow_set and "ask_operator" not in decision.allow_set
        if decision.outcome is CodeVerdict.RUN:
            assert decision.read_only
    else:
        assert "ask_operator" not in decision.allow_set
        assert decision.outcome is not CodeVerdict.REFUSE
    if decision.reason is ReviewReason.DURABLE_GRANT:
        assert set(decision.allow_set) <= {P} and not decision.opaque_reasons
    if read_only != "read_only":
        # Nothing that changes state (or cannot be analysed) ever runs without a fresh answer.
        assert decision.outcome is not CodeVerdict.RUN
        assert "auto_run" not in [c.value for c in decision.choices]


# -- automatic phase: stored procedures and tools an unattended run cannot use ------------------------


def _automatic(code: str, procedure_code: dict[str, str] | None = None, source: str = "generated") -> ReviewDecision:
    procedures = procedure_code or {}
    tools = [*RAW_TOOLS, *(ToolFacts(name=name, origin="procedure") for name in procedures)]
    return decide_review(
        ReviewRequest(
            phase=Phase.AUTOMATIC,
            code=code,
            catalog=ToolCatalog.build(tools, procedures),
            source=source,
        )
    )


@pytest.mark.parametrize(
    ("stored_code", "outcome", "reason", "suggest"),
    [
        (PROCEDURE_CODE["read_only"], CodeVerdict.RUN, ReviewReason.AUTOMATIC_READ_ONLY, False),
        (PROCEDURE_CODE["state_changing"], CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_SKIP_AND_SUGGEST, True),
        (PROCEDURE_CODE["opaque"], CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_SKIP_AND_SUGGEST, True),
        ("await tools.ask_operator()", CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_TOOL_NOT_ALLOWED, True),
    ],
)
def test_stored_procedure_in_automatic_phase_is_skipped_and_suggested(stored_code, outcome, reason, suggest) -> None:
    decision = _automatic(stored_code, source="stored_procedure")
    assert (decision.outcome, decision.reason, decision.suggest_interactive) == (outcome, reason, suggest)


@pytest.mark.parametrize(
    "code",
    [
        "await tools.kill_task(1)",
        "m = tools.kill_task\nawait m()",
        "from sandbox_tools import kill_task as k\nawait k()",
        'await getattr(tools, "kill_task")()',
        f"await tools.{P}()",  # a replayed procedure whose code kills
    ],
)
def test_kill_task_is_refused_in_the_automatic_phase_however_it_is_reached(code: str) -> None:
    decision = _automatic(code, {P: PROCEDURE_CODE["state_changing"]})
    assert decision.outcome is CodeVerdict.REFUSE
    assert "kill_task" in decision.state_changing


def test_human_input_tools_are_not_available_unattended() -> None:
    decision = _automatic("await tools.ask_operator('which job?')")
    assert (decision.outcome, decision.reason) == (CodeVerdict.REFUSE, ReviewReason.AUTOMATIC_TOOL_NOT_ALLOWED)


# -- interactive scenarios from the issue -------------------------------------------------------------


def _interactive(
    code: str,
    procedure_code: dict[str, str],
    policies: dict[str, SessionPolicy] | None = None,
    grants: dict[str, ProcedureGrant] | None = None,
    policy: DeploymentPolicy | None = OPEN,
) -> ReviewDecision:
    tools = [*RAW_TOOLS, *(ToolFacts(name=name, origin="procedure") for name in procedure_code)]
    return decide_review(
        ReviewRequest(
            phase=Phase.INTERACTIVE,
            code=code,
            catalog=ToolCatalog.build(tools, procedure_code),
            session_policies=policies or {},
            grants=grants or {},
            policy=policy,
        )
    )


def test_auto_run_covers_identical_and_reformatted_code_but_not_a_logic_change() -> None:
    code = "jobs = await tools.get_jobs(task_id=1)\nif len(jobs) > 3:\n    print(jobs)"
    key, entry = make_session_policy(code, CodePolicy.AUTO_RUN, {}, "approver")
    reformatted = code.replace("\n", "   \r\n") + "\n\n"
    assert _interactive(reformatted, {}, {key: entry}).reason is ReviewReason.SESSION_AUTO_RUN
    # a blank line between statements moves every line number after it, which a program can read
    assert _interactive(code.replace("\n", "\n\n", 1), {}, {key: entry}).reason is ReviewReason.NEW_CODE
    one_character = code.replace("> 3", "> 4")
    assert _interactive(one_character, {}, {key: entry}).reason is ReviewReason.NEW_CODE
    assert _interactive(code, {}, {}).reason is ReviewReason.NEW_CODE  # after /revoke


def test_session_auto_run_is_bound_to_the_procedure_code_it_was_approved_with() -> None:
    procedures = {P: PROCEDURE_CODE["read_only"]}
    code = f"await tools.{P}()"
    key, entry = make_session_policy(code, CodePolicy.AUTO_RUN, procedures, "approver")
    assert _interactive(code, procedures, {key: entry}).reason is ReviewReason.SESSION_AUTO_RUN
    changed = {P: PROCEDURE_CODE["read_only"] + "\nawait tools.get_task(2)"}
    decision = _interactive(code, changed, {key: entry})
    assert (decision.outcome, decision.reason) == (CodeVerdict.ASK, ReviewReason.SESSION_AUTO_RUN_PROCEDURE_CHANGED)


def test_durable_grant_replays_in_a_new_session_until_the_code_changes_or_the_grant_goes() -> None:
    procedures = {P: PROCEDURE_CODE["read_only"]}
    grants = {P: make_grant(P, procedures, "granter", AT)}
    code = f"summary = await tools.{P}()\nprint(summary)"
    decision = _interactive(code, procedures, grants=grants)
    assert (decision.outcome, decision.allow_set) == (CodeVerdict.RUN, (P,))
    changed = {P: PROCEDURE_CODE["read_only"].replace("get_jobs()", "get_jobs(limit=5)")}
    assert _interactive(code, changed, grants=grants).reason is ReviewReason.DURABLE_GRANT_CODE_CHANGED
    assert _interactive(code, procedures, grants={}).reason is ReviewReason.NEW_CODE


def test_durable_grant_checks_content_not_just_names() -> None:
    """Upstream defect #3: a turn naming only granted procedures ran whatever else it contained."""
    procedures = {P: PROCEDURE_CODE["read_only"]}
    grants = {P: make_grant(P, procedures, "granter", AT)}
    sneaky = [
        f"await tools.{P}()\nawait getattr(tools, 'kill' + '_task')()",
        f"await tools.{P}()\nimport sys\nsys.modules['sandbox_tools'].kill_task()",
        f"await tools.{P}()\nh = tools\nawait h.kill_task()",
        f"await tools.{P}()\n().__class__.__base__.__subclasses__()",
    ]
    for code in sneaky:
        decision = _interactive(code, procedures, grants=grants)
        assert decision.outcome is CodeVerdict.ASK, code
        assert decision.reason is ReviewReason.DURABLE_GRANT_OPAQUE, code


def test_nested_procedures_need_their_own_grants() -> None:
    procedures = {
        "proc__outer": "await tools.proc__inner()\nawait tools.get_task()",
        "proc__inner": "await tools.get_jobs()",
    }
    outer_only = {"proc__outer": make_grant("proc__outer", procedures, "granter", AT)}
    code = "await tools.proc__outer()"
    assert _interactive(code, procedures, grants=outer_only).reason is ReviewReason.DURABLE_GRANT_MIXED
    both = {**outer_only, "proc__inner": make_grant("proc__inner", procedures, "granter", AT)}
    decision = _interactive(code, procedures, grants=both)
    assert (decision.outcome, decision.allow_set) == (CodeVerdict.RUN, ("proc__outer",))


def test_code_without_tool_calls_is_still_reviewed() -> None:
    assert _interactive("print('hello')", {}).reason is ReviewReason.NEW_CODE


def test_a_granted_procedure_name_without_stored_code_is_not_auto_run() -> None:
    grants = {P: ProcedureGrant(procedure=P, code_hash=code_hash("x"), granted_by="granter", granted_at=AT)}
    decision = _interactive(f"await tools.{P}()", {}, grants=grants)
    assert decision.outcome is CodeVerdict.ASK


def test_session_auto_run_never_covers_raw_state_changing_code() -> None:
    """Issue: once anyone picked auto-run for code calling kill_task directly, identical later turns ran it."""
    code = "await tools.kill_task(task_id=1)"
    key, entry = make_session_policy(code, CodePolicy.AUTO_RUN, {}, "approver")
    decision = _interactive(code, {}, {key: entry})
    assert (decision.outcome, decision.reason) == (CodeVerdict.ASK, ReviewReason.SESSION_AUTO_RUN_STATE_CHANGING)
    assert "auto_run" not in [c.value for c in decision.choices]
    assert "auto_run" not in [c.value for c in _interactive(code, {}).choices]


def test_a_session_auto_run_lapses_with_its_approvers_right_to_approve() -> None:
    """A durable grant lapses with its approver (grant_is_signed); a session auto-run kept running after its
    approver's key was revoked. It counts only while the approver may still approve read-only code."""
    code = "await tools.get_task(task_id=1)"
    key, entry = make_session_policy(code, CodePolicy.AUTO_RUN, {}, "bob")

    def registry(**roles: set[Role]) -> DeploymentPolicy:
        return DeploymentPolicy(approvers=tuple(RegisteredKey(identity=name, public_key="A" * 43 + "=",
                                                              roles=frozenset(held)) for name, held in roles.items()))

    for still in (registry(bob={Role.APPROVE}), registry(bob={Role.APPROVE_STATE_CHANGING})):
        assert _interactive(code, {}, {key: entry}, policy=still).reason is ReviewReason.SESSION_AUTO_RUN
    for gone in (registry(alice={Role.APPROVE}), registry(bob={Role.REQUEST}), None):  # revoked, demoted, unknown
        decision = _interactive(code, {}, {key: entry}, policy=gone)
        assert (decision.outcome, decision.reason) == (CodeVerdict.ASK, ReviewReason.SESSION_AUTO_RUN_APPROVER_GONE)
        assert "auto_run" in [c.value for c in decision.choices]  # bob's successor may choose it again


def test_an_approved_run_may_call_only_the_tools_its_review_showed() -> None:
    hidden = "t = await tools.get_task(1)\nimport os\nawait os.path.sys.modules[name].kill_task(1)"
    assert "kill_task" not in decide_review(ReviewRequest(
        phase=Phase.INTERACTIVE, code="t = await tools.get_task(1)",
        catalog=ToolCatalog.build(RAW_TOOLS))).allow_set
    opaque = decide_review(ReviewRequest(phase=Phase.INTERACTIVE, code=hidden, catalog=ToolCatalog.build(RAW_TOOLS)))
    # The scan cannot vouch for this code, so it is shown as such and may reach any bridged tool once approved.
    assert opaque.opaque_reasons and not opaque.read_only and "kill_task" in opaque.allow_set


# -- attribute walks spelled as ``match`` patterns (issue 24) --------------------------------------------

MATCH_GADGET = ("def probe():\n    pass\n"
                "match probe:\n    case object(__globals__=namespace):\n        found = sorted(namespace)[:1]\n")


def test_a_match_pattern_attribute_walk_is_opaque_and_never_offered_auto_run() -> None:
    """The scan never read class-pattern attribute names: this code was titled read-only and offered auto-run."""
    code = "t = await tools.get_task(1)\n" + MATCH_GADGET
    fresh = _interactive(code, {})
    assert (fresh.outcome, fresh.reason, fresh.read_only) == (CodeVerdict.ASK, ReviewReason.NEW_CODE, False)
    assert any("__globals__" in reason for reason in fresh.opaque_reasons), fresh.opaque_reasons
    assert fresh.choices == STATE_CHANGING_CHOICES and "auto_run" not in [c.value for c in fresh.choices]
    key, entry = make_session_policy(code, CodePolicy.AUTO_RUN, {}, "approver")
    standing = _interactive(code, {}, {key: entry})
    assert (standing.outcome, standing.reason) == (CodeVerdict.ASK, ReviewReason.SESSION_AUTO_RUN_STATE_CHANGING)
    assert _automatic(code).outcome is CodeVerdict.REFUSE


def test_a_procedure_body_using_a_match_gadget_is_not_re_granted() -> None:
    """Seen: the body was re-captured under an already granted name, and its review offered auto-run again, which
    re-grants it. Its review must now show it as unanalysable and offer no standing permission."""
    from policy.procedures import is_exposable_procedure

    granted = {P: PROCEDURE_CODE["read_only"]}
    grants = {P: make_grant(P, granted, "granter", AT)}
    recaptured = {P: PROCEDURE_CODE["read_only"] + "\n" + MATCH_GADGET}  # the same tools, so the same name
    decision = _interactive(f"await tools.{P}()", recaptured, grants=grants)
    assert (decision.outcome, decision.reason) == (CodeVerdict.ASK, ReviewReason.DURABLE_GRANT_CODE_CHANGED)
    assert not decision.read_only and any("__globals__" in reason for reason in decision.opaque_reasons)
    assert "auto_run" not in [c.value for c in decision.choices]
    flags = ToolCatalog.build(RAW_TOOLS).read_only_flags()
    assert not is_exposable_procedure(P, flags, recaptured)


def test_code_is_judged_as_it_runs_not_as_it_was_sent() -> None:
    """The sandbox runs the normal form (code_identity). Sent with a blank after a line-continuation backslash,
    this does not parse, so the review called it opaque and named no tool, while the normal form (the blank
    stripped) parses and kills; the approver was shown a program that cannot run."""
    sent = ('info = await tools.get_task(task_id=1)\nif info["status"] == "running": \\ \n'
            '    await tools.kill_task(task_id=1)')
    catalog = ToolCatalog.build(RAW_TOOLS, {})
    decision = decide_review(ReviewRequest(phase=Phase.INTERACTIVE, code=sent, catalog=catalog))
    assert decision.opaque_reasons == () and decision.state_changing == ("kill_task",)
    assert decision.code_hash == code_hash(sent)
