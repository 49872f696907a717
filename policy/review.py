"""The review decision: may this block run now without a prompt, must a human look first, or never here?

Rules (docs/trust-model.md):

Automatic phase (nobody is watching): code that recomputes as read-only runs with the read-only allow-set;
anything else (a state-changing or unknown tool, a procedure whose current code changes state, code the
scan cannot read) is refused. A stored procedure refused this way is "skip and suggest": the caller shows
it to the operator as a strategy to run in the interactive loop.

Interactive phase:
1. always-ask for this exact code hash: ask.
2. a turn whose tool references are only procedures, every procedure it reaches holding a durable grant
   bound to that procedure's current code, and all of them read-only: run with no prompt, allow-set =
   exactly those procedures. Likewise a turn that reuses a stored procedure (``policy.reuse``) and is exactly
   that procedure's current body as bound for this task, the procedure (and any it reaches) durably granted
   for that body and read-only: run with no prompt, allow-set = the tools the body reaches.
3. auto-run for this exact code hash, with the procedures it reaches unchanged since approval, the whole
   code read-only as recomputed now, and whoever chose it still allowed to approve it: run with no prompt.
4. otherwise ask (new code is always reviewed), with the reason that explains why no standing permission
   applied.

State-changing code (and code the scan cannot read) is never run without a fresh answer: no session
auto-run, no durable grant covers it, and auto-run is not offered for it. Changing PanDA is a new
real-world action each time, and the rule that someone other than the requester approves it must apply
each time. (The deployment opt-in ``allow_mutating_autorun`` therefore only exposes state-changing
procedures to the planner; it never lets them run unreviewed.)

An approved run may call exactly the tools the review showed (``policy.phases.approved_allow_set``).
Every decision is recomputed from the code itself; no stored read-only flag or stored verdict is trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from policy.approvers import DeploymentPolicy
from policy.catalog import ToolCatalog
from policy.code_identity import hash_of_normal_form, normalize_code
from policy.decisions import ALL_CHOICES, ALWAYS_ASK_CHOICES, STATE_CHANGING_CHOICES, DecisionKind
from policy.grants import (
    CodePolicy, ProcedureGrant, SessionPolicy, grant_matches, session_approver_stands, session_policy_still_valid,
)
from policy.phases import Phase, approved_allow_set, automatic_allow_set, granted_allow_set
from policy.procedures import ReadOnlyAssessment, assess_read_only
from policy.reuse import ReusedCode, is_bound_body
from policy.signature import ScanConventions


class CodeVerdict(str, Enum):
    """What happens to a code block: it runs now, a person is asked, or it is refused here. (Distinct from
    an extraction review, which is the model checking a learned graph.)"""

    RUN = "run"
    ASK = "ask"
    REFUSE = "refuse"


class ReviewReason(str, Enum):
    AUTOMATIC_READ_ONLY = "automatic_read_only"
    AUTOMATIC_STATE_CHANGING = "automatic_state_changing"
    AUTOMATIC_OPAQUE = "automatic_opaque"
    AUTOMATIC_TOOL_NOT_ALLOWED = "automatic_tool_not_allowed"
    AUTOMATIC_SKIP_AND_SUGGEST = "automatic_skip_and_suggest"
    SESSION_ALWAYS_ASK = "session_always_ask"
    SESSION_AUTO_RUN = "session_auto_run"
    SESSION_AUTO_RUN_PROCEDURE_CHANGED = "session_auto_run_procedure_changed"
    SESSION_AUTO_RUN_STATE_CHANGING = "session_auto_run_state_changing"
    SESSION_AUTO_RUN_APPROVER_GONE = "session_auto_run_approver_gone"
    DURABLE_GRANT = "durable_grant"
    DURABLE_GRANT_CODE_CHANGED = "durable_grant_code_changed"
    DURABLE_GRANT_STATE_CHANGING = "durable_grant_state_changing"
    DURABLE_GRANT_OPAQUE = "durable_grant_opaque"
    DURABLE_GRANT_MIXED = "durable_grant_mixed_with_ungranted"
    NEW_CODE = "new_code"


CodeSource = Literal["generated", "stored_procedure"]


class ReviewRequest(BaseModel):
    """Everything the decision depends on, passed in whole so the decision is a pure function of it."""

    model_config = ConfigDict(frozen=True)

    phase: Phase
    code: str
    catalog: ToolCatalog = Field(default_factory=ToolCatalog)
    session_policies: Mapping[str, SessionPolicy] = Field(default_factory=dict)
    grants: Mapping[str, ProcedureGrant] = Field(default_factory=dict)
    source: CodeSource = "generated"
    reused: ReusedCode | None = Field(default=None, description="the stored procedure this code reuses, if any")
    # The deployment's rules and registry now: a session auto-run counts only while the person who chose it may
    # still approve the code (``session_approver_stands``). Without it no session auto-run counts.
    policy: DeploymentPolicy | None = None

    @property
    def conventions(self) -> ScanConventions:
        """The scan maps Python names to tools over this catalogue, as the sandbox's stub does."""
        return ScanConventions.for_tools(tool.name for tool in self.catalog.tools)


class ReviewDecision(BaseModel):
    """The verdict and the allow-set the run must use (empty when refused).

    For ``ASK`` the allow-set is the one an approval would run with, and ``choices`` are the answers to
    offer. ``suggest_interactive`` marks a stored procedure skipped in an automatic phase that should be
    offered to the operator instead.
    """

    model_config = ConfigDict(frozen=True)

    outcome: CodeVerdict
    reason: ReviewReason
    detail: str
    code_hash: str
    tools: tuple[str, ...]
    procedures: tuple[str, ...]
    read_only: bool
    state_changing: tuple[str, ...]
    opaque_reasons: tuple[str, ...]
    allow_set: tuple[str, ...] = ()
    choices: tuple[DecisionKind, ...] = ()
    suggest_interactive: bool = False


def decide_review(request: ReviewRequest) -> ReviewDecision:
    """Decide whether ``request.code`` runs without a prompt, is asked about, or is refused."""
    catalog = request.catalog
    # Judged as it runs: the sandbox runs the normal form (code_identity), which can parse where the text
    # as sent does not (a blank after a line-continuation backslash), or end a line the text draws as one.
    runs = normalize_code(request.code)
    assessment = assess_read_only(runs, catalog.read_only_flags(), catalog.procedure_code, request.conventions)
    facts = _Facts(request, assessment, hash_of_normal_form(runs))
    if request.phase is Phase.AUTOMATIC:
        return _decide_automatic(facts)
    return _decide_interactive(facts)


class _Facts:
    """The recomputed facts about one request, and the decision constructors that share them."""

    def __init__(self, request: ReviewRequest, assessment: ReadOnlyAssessment, hash_: str) -> None:
        self.request = request
        self.assessment = assessment
        self.code_hash = hash_

    def decision(
        self,
        outcome: CodeVerdict,
        reason: ReviewReason,
        detail: str,
        allow_set: frozenset[str] = frozenset(),
        choices: tuple[DecisionKind, ...] = (),
        suggest: bool = False,
    ) -> ReviewDecision:
        return ReviewDecision(
            outcome=outcome,
            reason=reason,
            detail=detail,
            code_hash=self.code_hash,
            tools=self.assessment.signature.tools,
            procedures=self.assessment.all_procedures,
            read_only=self.assessment.read_only,
            state_changing=self.assessment.state_changing,
            opaque_reasons=self.assessment.opaque_reasons,
            allow_set=tuple(sorted(allow_set)),
            choices=choices,
            suggest_interactive=suggest,
        )

    def ask(self, reason: ReviewReason, detail: str, choices: tuple[DecisionKind, ...] | None = None) -> ReviewDecision:
        if choices is None:
            choices = ALL_CHOICES if self.assessment.read_only else STATE_CHANGING_CHOICES
        return self.decision(CodeVerdict.ASK, reason, detail, self.approved_allow_set(), choices)

    def approved_allow_set(self) -> frozenset[str]:
        return approved_allow_set(self.assessment.signature, self.request.catalog)


def _decide_automatic(facts: _Facts) -> ReviewDecision:
    assessment = facts.assessment
    stored = facts.request.source == "stored_procedure"
    if not assessment.read_only:
        if stored:
            return facts.decision(
                CodeVerdict.REFUSE,
                ReviewReason.AUTOMATIC_SKIP_AND_SUGGEST,
                "This stored procedure would change state (or cannot be analysed), so it is not replayed "
                "unattended; offer it to the operator to run in an interactive investigation.",
                suggest=True,
            )
        if assessment.opaque:
            return facts.decision(
                CodeVerdict.REFUSE,
                ReviewReason.AUTOMATIC_OPAQUE,
                "Automatic phases run only code that can be shown to read only; this code cannot be analysed: "
                + "; ".join(assessment.opaque_reasons),
            )
        return facts.decision(
            CodeVerdict.REFUSE,
            ReviewReason.AUTOMATIC_STATE_CHANGING,
            "Automatic phases are read-only; this code would call state-changing or unknown tools: "
            + ", ".join(assessment.state_changing),
        )
    allowed = automatic_allow_set(facts.request.catalog, facts.request.conventions)
    outside = sorted(set(assessment.signature.tools) - allowed)
    if outside:
        return facts.decision(
            CodeVerdict.REFUSE,
            ReviewReason.AUTOMATIC_TOOL_NOT_ALLOWED,
            "These tools are not available to an unattended run (they need a human or are not bridged): "
            + ", ".join(outside),
            suggest=stored,
        )
    return facts.decision(
        CodeVerdict.RUN, ReviewReason.AUTOMATIC_READ_ONLY, "Read-only code in an automatic phase.", allowed
    )


def _decide_interactive(facts: _Facts) -> ReviewDecision:
    request = facts.request
    entry = request.session_policies.get(facts.code_hash)
    if entry is not None and entry.policy is CodePolicy.ALWAYS_ASK:
        return facts.ask(
            ReviewReason.SESSION_ALWAYS_ASK, "You asked to review this code every time it runs.", ALWAYS_ASK_CHOICES
        )
    reused = _reused_grant_standing(facts)
    if reused.reason is ReviewReason.DURABLE_GRANT:
        return facts.decision(
            CodeVerdict.RUN,
            ReviewReason.DURABLE_GRANT,
            "Reuses a durably granted read-only procedure, exactly its body as granted, bound for this task.",
            facts.approved_allow_set(),
        )
    durable = reused if reused.reason is not None else _durable_grant_standing(facts)
    if durable.reason is ReviewReason.DURABLE_GRANT:
        return facts.decision(
            CodeVerdict.RUN,
            ReviewReason.DURABLE_GRANT,
            "Replays only durably granted procedures whose code is unchanged since the grant.",
            granted_allow_set(facts.assessment.signature.tools),
        )
    if entry is not None and entry.policy is CodePolicy.AUTO_RUN:
        reached = facts.assessment.all_procedures
        if not session_policy_still_valid(entry, request.catalog.procedure_code, reached):
            return facts.ask(
                ReviewReason.SESSION_AUTO_RUN_PROCEDURE_CHANGED,
                "You chose auto-run for this code, but a procedure it calls has changed since; review it again.",
            )
        if not facts.assessment.read_only:
            what = ", ".join(facts.assessment.state_changing) or "; ".join(facts.assessment.opaque_reasons)
            return facts.ask(
                ReviewReason.SESSION_AUTO_RUN_STATE_CHANGING,
                f"This code changes state or cannot be analysed ({what}); auto-run never covers such code, "
                "so every run needs a fresh approval.",
            )
        if request.policy is None or not session_approver_stands(entry, request.policy):
            return facts.ask(
                ReviewReason.SESSION_AUTO_RUN_APPROVER_GONE,
                f"{entry.approved_by or 'Nobody named'} chose auto-run for this code, but may no longer approve it "
                "here (key revoked or role removed); review it again.",
            )
        return facts.decision(
            CodeVerdict.RUN,
            ReviewReason.SESSION_AUTO_RUN,
            "You chose auto-run for this exact code earlier in this session.",
            facts.approved_allow_set(),
        )
    if durable.reason is not None:
        return facts.ask(durable.reason, durable.detail)
    return facts.ask(ReviewReason.NEW_CODE, "New code is always reviewed before it runs.")


class _DurableStanding(BaseModel):
    reason: ReviewReason | None = None
    detail: str = ""


def _durable_grant_standing(facts: _Facts) -> _DurableStanding:
    """Whether durable grants let this turn run unprompted; if they almost do, why not.

    Returns ``reason=None`` when the turn has nothing to do with grants (no granted procedure in it).
    """
    request = facts.request
    assessment = facts.assessment
    procedure_code = request.catalog.procedure_code
    direct = assessment.signature.tools
    reached = set(assessment.all_procedures)
    granted = {name for name in reached if name in request.grants}
    if not granted:
        return _DurableStanding()
    stale = sorted(name for name in granted if not grant_matches(request.grants[name], name, procedure_code))
    if stale:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_CODE_CHANGED,
            detail="The code of " + ", ".join(stale) + " changed after it was granted auto-run; review it again.",
        )
    if assessment.opaque:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_OPAQUE,
            detail="This turn (or a procedure it replays) cannot be analysed: "
            + "; ".join(assessment.opaque_reasons)
            + "; review it.",
        )
    ungranted = sorted({*(name for name in direct if name not in procedure_code), *(reached - granted)})
    if ungranted:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_MIXED,
            detail="This turn does more than replay granted procedures (" + ", ".join(ungranted) + "); review it.",
        )
    if not assessment.read_only:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_STATE_CHANGING,
            detail="A granted procedure now changes state ("
            + ", ".join(assessment.state_changing)
            + "); state-changing procedures are never auto-run, whatever grant they hold.",
        )
    return _DurableStanding(reason=ReviewReason.DURABLE_GRANT)


def _reused_grant_standing(facts: _Facts) -> _DurableStanding:
    """Whether the durable grant of the procedure this turn reuses lets it run unprompted; if it almost does, why
    not. ``reason=None`` when the turn reuses nothing, or a procedure nobody granted (the ordinary rules apply).

    The grant covers the body it was given for: the code must be that procedure's current body exactly as bound
    for this task, the body unchanged since the grant, every procedure it reaches granted for its current code
    too, and the whole read-only; state-changing code is never covered, whatever grant it holds.
    """
    request = facts.request
    reused = request.reused
    if reused is None or reused.procedure not in request.grants:
        return _DurableStanding()
    name = reused.procedure
    procedure_code = request.catalog.procedure_code
    if not is_bound_body(request.code, reused, procedure_code):
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_MIXED,
            detail=f"This turn is not the stored body of {name} as bound for this task; review it.",
        )
    if not grant_matches(request.grants[name], name, procedure_code):
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_CODE_CHANGED,
            detail=f"The code of {name} changed after it was granted auto-run; review it again.",
        )
    assessment = facts.assessment
    if assessment.opaque:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_OPAQUE,
            detail=f"{name} cannot be analysed: " + "; ".join(assessment.opaque_reasons) + "; review it.",
        )
    ungranted = sorted(p for p in assessment.all_procedures
                       if not grant_matches(request.grants.get(p), p, procedure_code))
    if ungranted:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_MIXED,
            detail=f"{name} replays procedures without a grant for their current code (" + ", ".join(ungranted)
            + "); review it.",
        )
    if not assessment.read_only:
        return _DurableStanding(
            reason=ReviewReason.DURABLE_GRANT_STATE_CHANGING,
            detail=f"{name} changes state (" + ", ".join(assessment.state_changing)
            + "); state-changing procedures are never auto-run, whatever grant they hold.",
        )
    return _DurableStanding(reason=ReviewReason.DURABLE_GRANT)
