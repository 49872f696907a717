"""Which captured investigation procedures of a known cause may be replayed in the automatic phase.

A captured procedure is knowledge, not authorization: its stored code is judged by the trust policy
(`decide_review`, phase automatic, source stored_procedure) from the code itself. Read-only code is
replayable, with an allow-set of only the tools its code reaches (`replay_allow_set`); code that would call a
state-changing tool is skipped and listed as a suggestion for an operator; a procedure recorded as prose only (from
a resolution record) is a manual step.
"""

from __future__ import annotations

from bamboo.analysis.contract import ProcedurePlan, ProcedureStep
from bamboo.analysis.queries import ProcedureRow
from policy.catalog import ToolCatalog, ToolFacts
from policy.phases import Phase, replay_allow_set
from policy.review import CodeVerdict, ReviewRequest, decide_review


def builtin_catalog(procedure_code: dict[str, str]) -> ToolCatalog:
    """The built-in PanDA tools' read-only facts plus the stored procedures, as the policy sees them."""
    from bamboo.panda.tools import builtin_tools

    facts = [ToolFacts.from_spec(t.spec) for t in builtin_tools()]
    facts += [ToolFacts(name=name, read_only=False, origin="procedure") for name in procedure_code]
    return ToolCatalog.build(facts, procedure_code)


def plan_procedures(cause: str, rows: list[ProcedureRow], catalog: ToolCatalog) -> ProcedurePlan:
    steps = []
    for row in rows:
        if not row.code:
            steps.append(ProcedureStep(name=row.name, description=row.description, order=row.order,
                                       disposition="manual_step",
                                       reason="recorded as prose (no captured code to replay)"))
            continue
        decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=row.code, catalog=catalog,
                                               source="stored_procedure"))
        if decision.outcome is CodeVerdict.RUN:
            steps.append(ProcedureStep(name=row.name, description=row.description, order=row.order, has_code=True,
                                       disposition="replayable", reason=decision.detail, code=row.code,
                                       allowed_tools=sorted(replay_allow_set(row.name, Phase.AUTOMATIC, catalog))))
        else:
            steps.append(ProcedureStep(name=row.name, description=row.description, order=row.order, has_code=True,
                                       state_changing_tools=list(decision.state_changing), disposition="suggestion",
                                       reason=decision.detail))
    return ProcedurePlan(cause=cause, steps=steps)
