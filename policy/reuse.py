"""Reuse before regenerate: which stored procedure answers a turn, and the exact code it is proposed as.

A stored procedure is code people reviewed, approved and ran before. When one fits a turn, proposing it again
costs no model call and gives the reviewer code with a history instead of new code. Whether one fits is
decided here, deterministically, from facts an activity read (each approved procedure with its provenance and
how near its triggers are to the operator's request, the task's clues and parameters) and the live catalogue;
the workflow calls this, so the choice is replayable.

A procedure fits when

- the scan reads it (opaque code is never proposed without a model's or a person's explicit say) and it calls
  at least one tool;
- every tool it reaches, through nested procedures too, is one the catalogue offers now (a procedure calling a
  tool that is gone does not fit), and every procedure it reaches is approved now;
- it was not captured for another cause: when the session's analysis chose a cause and the procedure records
  the causes it was captured for, the chosen cause is one of them;
- every parameter its body reads (``task_id``, ``site``, ``dataset``) is known for this task;
- the request is near one of its triggers (cosine similarity of the deployment's embeddings) by at least the
  threshold, which is stricter for state-changing procedures: a retry proposed for "kill the task" would be
  reviewed, but should not be proposed.

Among those that fit, the nearest wins; a match of the session's cause and the task's clues the procedure was
captured on add to its score, then frequency and name break ties.

The proposal is the stored body behind one line per parameter, so the exact values it runs with are part of the
hashed, reviewed and signed code. Reused code is reviewed like any code (``policy.review``): only a read-only
procedure's durable grant, given for this exact body, lets it run unprompted.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from policy.catalog import ToolCatalog
from policy.code_identity import normalize_code
from policy.procedures import assess_read_only, is_procedure_name
from policy.signature import ScanConventions

PARAMETERS: tuple[str, ...] = ("task_id", "site", "dataset")
# A site or dataset name as PanDA writes them; anything else (quotes, spaces, controls) is not bound, so a
# value read from PanDA can never change what the reviewed line says.
SAFE_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,199}\Z")
MAX_TASK_ID = 2**63 - 1
CAUSE_BONUS = 0.1
CLUE_WEIGHT = 0.05
MAX_UNFIT_SHOWN = 8

ParameterValue = Annotated[StrictInt | StrictStr, Field(union_mode="left_to_right")]


class ReuseSettings(BaseModel):
    """The deployment's thresholds (worker settings), handed to the workflow with the candidates."""

    model_config = ConfigDict(frozen=True)

    threshold: float = Field(default=0.7, ge=0.0, le=1.0, description="least similarity for a read-only one")
    state_changing_threshold: float = Field(default=0.8, ge=0.0, le=1.0,
                                            description="least similarity for a state-changing (or opaque) one")
    tool_margin: float = Field(
        default=0.05, ge=0.0, le=2.0,
        description="how much better a tool the procedure does not call may fit the request before it is not "
                    "proposed (a request about logs is not answered by a status procedure that reads no log)")
    verbatim: float = Field(default=0.95, ge=0.0, le=1.0,
                            description="a request this near a trigger is what the procedure was captured for: "
                                        "the tool check does not apply")


class ProcedureCandidate(BaseModel):
    """One approved procedure as the reuse step sees it: its current body, its provenance, and how near the
    operator's request is to what it was captured for."""

    model_config = ConfigDict(frozen=True)

    name: str
    code: str
    code_hash: str
    similarity: float = Field(ge=-1.0, le=1.0)
    matched: str = Field(default="", description="the trigger the request was nearest to")
    summary: str = ""
    causes: tuple[str, ...] = ()
    clues: tuple[str, ...] = ()
    incidents: tuple[str, ...] = ()
    frequency: int = 0
    reviewed_by: tuple[str, ...] = ()
    source: str = ""
    last_run_at: datetime | None = None
    last_run_status: str = ""
    versions: int = 1
    previous_code: str | None = Field(default=None, description="the body it had before this one, if it changed")


class TaskFacts(BaseModel):
    """What the reuse step knows of the task: its clue names and the parameter values a body may be bound to."""

    model_config = ConfigDict(frozen=True)

    clues: tuple[str, ...] = ()
    parameters: dict[str, ParameterValue] = Field(default_factory=dict)
    note: str = Field(default="", description="why something is missing (the task could not be read)")
    status: str = Field(default="", max_length=64, description="the task's status when it was read")
    owner: str = Field(default="", max_length=200, description="the task's owner (PanDA's userName)")


class ReusedCode(BaseModel):
    """Which stored procedure a proposal is, and the values bound into it: enough for the review to check that
    the code is exactly that procedure's current body as bound (``bind``)."""

    model_config = ConfigDict(frozen=True)

    procedure: str
    parameters: dict[str, ParameterValue] = Field(default_factory=dict)


class Unfit(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    reason: str


class ReuseProposal(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidate: ProcedureCandidate
    reused: ReusedCode
    code: str
    read_only: bool
    score: float
    cause_matched: bool = False
    shared_clues: tuple[str, ...] = ()


class ReuseOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    chosen: ReuseProposal | None = None
    unfit: tuple[Unfit, ...] = ()


def needed_parameters(body: str) -> tuple[str, ...]:
    """The parameters ``body`` reads without setting them itself, in ``PARAMETERS`` order (none if it does not
    parse: such code is opaque and never proposed anyway)."""
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError):
        return ()
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return tuple(p for p in PARAMETERS if p in loaded and p not in bound)


def valid_parameter(name: str, value: object) -> bool:
    """Whether ``value`` may be bound to ``name``: a task id is a positive 64-bit int, a site or dataset a plain
    name (``SAFE_TEXT``)."""
    if name == "task_id":
        return type(value) is int and 1 <= value <= MAX_TASK_ID
    return name in PARAMETERS and type(value) is str and bool(SAFE_TEXT.match(value))


def bind(procedure: str, body: str, parameters: Mapping[str, object]) -> str:
    """The code a reuse proposes: a header naming the procedure, one ``name = literal`` line per parameter the
    body reads, then the stored body unchanged. Raises ValueError for a missing or unsafe value."""
    if not is_procedure_name(procedure) or not procedure.isidentifier():
        raise ValueError(f"{procedure!r} is not a procedure name")
    lines = [f"# reuses {procedure}, bound for this task:"]
    for name in needed_parameters(body):
        value = parameters.get(name)
        if not valid_parameter(name, value):
            raise ValueError(f"{procedure} needs {name}, and this task gives no usable value for it")
        lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n" + body


def is_bound_body(code: str, reused: ReusedCode, procedure_code: Mapping[str, str]) -> bool:
    """True when ``code`` is the procedure's current stored body, bound with ``reused.parameters``: the same
    normal form, which is the text that runs (code_identity)."""
    body = procedure_code.get(reused.procedure)
    if body is None:
        return False
    try:
        return normalize_code(bind(reused.procedure, body, reused.parameters)) == normalize_code(code)
    except ValueError:
        return False


def choose_procedure(candidates: Sequence[ProcedureCandidate], catalog: ToolCatalog, task: TaskFacts,
                     cause: str | None, settings: ReuseSettings,
                     tool_fit: Mapping[str, float] | None = None) -> ReuseOutcome:
    """The stored procedure this turn should propose, if one fits, and why each other one does not.

    ``tool_fit`` is the request's similarity to each offered tool's description: a procedure whose own tools fit
    the request clearly worse than a tool it does not call answers another question (``better_tool``)."""
    conventions = ScanConventions.for_tools(tool.name for tool in catalog.tools)
    offered = {t.name for t in catalog.tools if t.origin != "procedure" and not t.requires_interaction}
    flags = catalog.read_only_flags()
    wanted_cause = (cause or "").strip().casefold()
    task_clues = set(task.clues)
    fits: list[ReuseProposal] = []
    unfit: list[Unfit] = []
    for candidate in sorted(candidates, key=lambda c: c.name):
        current = catalog.procedure_code.get(candidate.name)
        if current is None or current != candidate.code:
            unfit.append(Unfit(name=candidate.name, reason="is not an approved procedure with this body now"))
            continue
        verdict = assess_read_only(candidate.code, flags, catalog.procedure_code, conventions)
        if verdict.opaque:
            unfit.append(Unfit(name=candidate.name, reason="cannot be analysed, so it is never proposed by reuse"))
            continue
        if not verdict.signature.tools:
            unfit.append(Unfit(name=candidate.name, reason="calls no tool"))
            continue
        gone = sorted({*(t for t in verdict.raw_tools if t not in offered), *verdict.missing_procedures})
        if gone:
            unfit.append(Unfit(name=candidate.name,
                               reason=f"calls {', '.join(gone)}, which the catalogue does not offer now"))
            continue
        causes = {c.strip().casefold() for c in candidate.causes if c.strip()}
        if wanted_cause and causes and wanted_cause not in causes:
            unfit.append(Unfit(name=candidate.name, reason=f"was captured for {', '.join(sorted(candidate.causes))}, "
                                                           f"not for {cause}"))
            continue
        missing = [p for p in needed_parameters(candidate.code) if not valid_parameter(p, task.parameters.get(p))]
        if missing:
            unfit.append(Unfit(name=candidate.name, reason=f"needs {', '.join(missing)}, which this task does not give"))
            continue
        least = settings.threshold if verdict.read_only else settings.state_changing_threshold
        if candidate.similarity < least:
            unfit.append(Unfit(name=candidate.name,
                               reason=f"the request is not near what it was captured for "
                                      f"({candidate.similarity:.2f} < {least:.2f})"))
            continue
        better = better_tool(verdict.raw_tools, tool_fit or {}, settings.tool_margin) \
            if candidate.similarity < settings.verbatim else None
        if better is not None:
            unfit.append(Unfit(name=candidate.name, reason=f"calls none of what the request is about ({better} "
                                                           "fits it better than its own tools)"))
            continue
        shared = tuple(sorted(task_clues & set(candidate.clues)))
        matched = bool(wanted_cause and wanted_cause in causes)
        overlap = len(shared) / len(set(candidate.clues)) if candidate.clues else 0.0
        reused = ReusedCode(procedure=candidate.name,
                            parameters={p: task.parameters[p] for p in needed_parameters(candidate.code)})
        fits.append(ReuseProposal(
            candidate=candidate, reused=reused, code=bind(candidate.name, candidate.code, reused.parameters),
            read_only=verdict.read_only, cause_matched=matched, shared_clues=shared,
            score=round(candidate.similarity + (CAUSE_BONUS if matched else 0.0) + CLUE_WEIGHT * overlap, 6),
        ))
    fits.sort(key=lambda p: (-p.score, -p.candidate.frequency, p.candidate.name))
    return ReuseOutcome(chosen=fits[0] if fits else None, unfit=tuple(unfit))


def better_tool(own: Iterable[str], tool_fit: Mapping[str, float], margin: float) -> str | None:
    """The offered tool a procedure does not call that fits the request more than ``margin`` better than the
    best of the procedure's own tools, if any (None without fit figures for both)."""
    own = set(own)
    inside = [fit for name, fit in tool_fit.items() if name in own]
    outside = [(fit, name) for name, fit in tool_fit.items() if name not in own]
    if not inside or not outside:
        return None
    best_fit, best_name = max(outside)
    return best_name if best_fit - max(inside) > margin else None


def describe_unfit(unfit: Sequence[Unfit], farther: int = 0) -> str:
    """One line for the transcript: why no stored procedure was proposed (``farther``: those not weighed, as too
    far from the request)."""
    far = f"{farther} approved procedure{'s are' if farther != 1 else ' is'} not near the request"
    if not unfit:
        return far if farther else "no approved procedure is stored"
    shown = [f"{u.name} {u.reason}" for u in unfit[:MAX_UNFIT_SHOWN]]
    more = len(unfit) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "") + (f"; {far}" if farther else "")
