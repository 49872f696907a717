"""The exploratory investigation's plan: LLM-written read-only code, judged by the trust policy.

Analysis runs in the automatic phase (nobody is watching), so the model only sees the read-only tools,
and the code it writes is re-judged from its text by `decide_review`: anything that would reach a
state-changing or unknown tool is refused, never run. The code itself runs in the sandbox
(`execute_code`, on the sandbox queue) with exactly the allow-set decided here.
A model that returns neither code nor a capability gap is a genuine failure and raises, so the analysis reports the
step as failed instead of silently skipping it. In the analysis, code that calls no tool (a bare literal, as the
offline model often writes) is not run: it
cannot learn anything, and running it would cost a sandbox run and a re-diagnosis for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import json

from pydantic import BaseModel, Field

from bamboo.analysis.contract import CapabilityGap, Diagnosis, Evidence, ExplorationPlan
from bamboo.llm.client import LLMClient
from bamboo.tools.model import ToolSpec
from policy.catalog import ToolCatalog, ToolFacts
from policy.phases import Phase, automatic_allow_set
from policy.review import CodeVerdict, ReviewRequest, decide_review

SCHEMA_NAME = "analysis_exploration_code"

SYSTEM = (
    "You investigate a failed PanDA task with read-only tools. Write the body of an async Python function that "
    "calls the tools as `await tools.<name>(...)` with keyword arguments and returns a dict of what you found. "
    "Use only the tools listed. If a question cannot be answered by any listed tool, list it under "
    "capability_gaps instead. Answer with JSON only."
)


class ExplorationGap(BaseModel):
    investigation: str = Field(max_length=500)
    suggested_tool_capability: str = Field(max_length=500)


class ExplorationCode(BaseModel):
    code: str = Field(max_length=8000, description="body of an async function; may be empty")
    capability_gaps: list[ExplorationGap] = Field(max_length=10)


class ExplorationError(RuntimeError):
    """The model produced neither runnable code nor a capability gap."""


def builtin_tool_catalogue() -> tuple[list[ToolSpec], ToolCatalog]:
    from bamboo.panda.tools import builtin_tools

    specs = [t.spec for t in builtin_tools()]
    return specs, ToolCatalog.build(ToolFacts.from_spec(s) for s in specs)


def questions(evidence: Evidence, diagnosis: Diagnosis) -> list[str]:
    """What the exploration should settle, phrased from the evidence (review issues synthesised from it)."""
    out = [f"The initial diagnosis '{diagnosis.root_cause}' has low confidence ({diagnosis.confidence:.2f}); "
           "find job-level evidence that confirms or rules it out."]
    if len(evidence.candidates) > 1:
        out.append("Distinguish between the candidate causes: " + "; ".join(c.name for c in evidence.candidates[:3]))
    out += [f"Symptom {n.symptom} has no known cause ({n.reason})." for n in evidence.novel]
    return out


async def plan_exploration(llm: LLMClient, evidence: Evidence, diagnosis: Diagnosis,
                           specs: Sequence[ToolSpec] | None = None) -> ExplorationPlan:
    """The analysis's exploration; code that calls no tool is not run (see the module docstring)."""
    plan = await plan_read_only_code(llm, task_id=evidence.clues.task_id, status=evidence.clues.status,
                                     open_questions=questions(evidence, diagnosis), specs=specs)
    if plan.status == "run" and not plan.tools:
        return plan.model_copy(update={
            "status": "no_tool_call", "allowed_tools": [],
            "reason": "the generated code calls no tool, so running it could find nothing; not run"})
    return plan


async def plan_read_only_code(llm: LLMClient, *, task_id: int | None, status: str | None,
                              open_questions: list[str], specs: Sequence[ToolSpec] | None = None) -> ExplorationPlan:
    """Ask for read-only code that settles `open_questions`; the policy, not the model, decides if it may run.

    Shared by analysis (low-confidence diagnosis) and accumulation (first reviewer rejection): both are
    automatic phases, so both see and may run only the read-only tools. ``specs`` is the worker's live
    catalogue (built-in tools plus external MCP tools, read-only only where the operator vouched for them);
    without it, the built-in tools.
    """
    if specs is None:
        specs, catalog = builtin_tool_catalogue()
    else:
        specs = list(specs)
        catalog = ToolCatalog.build(ToolFacts.from_spec(s) for s in specs)
    allowed = automatic_allow_set(catalog)
    visible = [{"name": s.name, "description": s.description, "input_schema": s.input_schema}
               for s in specs if s.name in allowed]
    ask = {"task_id": task_id, "status": status, "questions": open_questions, "tools": visible}
    out = await llm.structured(system=SYSTEM, user=json.dumps(ask, default=str), output=ExplorationCode,
                               name=SCHEMA_NAME)
    gaps = [CapabilityGap(**g.model_dump()) for g in out.capability_gaps]
    if not out.code.strip():
        if not gaps:
            raise ExplorationError("the model returned neither investigation code nor a capability gap")
        return ExplorationPlan(status="nothing_to_do", capability_gaps=gaps,
                               reason="every open question needs a tool that does not exist")
    decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=out.code, catalog=catalog))
    if decision.outcome is not CodeVerdict.RUN:
        return ExplorationPlan(status="refused", code=out.code, capability_gaps=gaps,
                               reason=f"{decision.reason.value}: {decision.detail}")
    return ExplorationPlan(status="run", code=out.code, allowed_tools=sorted(decision.allow_set),
                           capability_gaps=gaps, reason=decision.detail, tools=list(decision.tools))
