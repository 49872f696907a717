"""Everything a reviewer must see besides the code: what each state-changing call is, where it is, and the
body of every procedure the code replays, with what changed since that procedure was granted.

A ``proc__`` call is a call of stored code; approving the call approves that code. So a review view shows
the body of every procedure the turn reaches (directly or nested), which of them change state, and, when
a procedure holds a grant for an earlier version, the diff from that granted version to the code that would
run now. Pure and deterministic: the workflow builds these facts and every front end renders them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from policy.code_hazards import Hazard, find_hazards
from policy.code_identity import hash_of_normal_form, normalize_code
from policy.grants import ProcedureGrant
from policy.procedures import ReadOnlyAssessment, assess_read_only
from policy.signature import ScanConventions

MAX_DIFF_LINES = 400


class ProcedureView(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    code: str
    code_hash: str
    read_only: bool
    state_changing: tuple[str, ...] = ()
    granted_to: str | None = Field(default=None, description="who holds a grant on it, if anyone")
    changed_since_grant: bool = False
    diff_from_granted: str = Field(default="", description="unified diff from the granted version, when it changed")
    hazards: tuple[Hazard, ...] = ()


class ReviewFacts(BaseModel):
    """What the review shows next to the code: hazards, where state-changing calls are, procedure bodies."""

    model_config = ConfigDict(frozen=True)

    hazards: tuple[Hazard, ...] = ()
    state_changing_lines: Mapping[str, tuple[int, ...]] = Field(default_factory=dict)
    opaque_reasons: tuple[str, ...] = ()
    procedures: tuple[ProcedureView, ...] = ()


def review_facts(
    code: str,
    assessment: ReadOnlyAssessment,
    read_only_flags: Mapping[str, bool],
    procedure_code: Mapping[str, str],
    grants: Mapping[str, ProcedureGrant],
    granted_code: Mapping[str, str],
    conventions: ScanConventions,
) -> ReviewFacts:
    """The facts for one pending review. ``granted_code`` maps a code hash to the code it was computed from,
    for the versions grants were given on (so a changed procedure can be shown as a diff)."""
    views = [procedure_view(name, procedure_code[name], read_only_flags, procedure_code, grants, granted_code,
                            conventions) for name in assessment.procedures]
    # A line is flagged when it names a state-changing tool or a procedure whose code changes state.
    flagged = set(assessment.state_changing) | {view.name for view in views if not view.read_only}
    lines = {name: found for name, found in assessment.signature.lines.items() if name in flagged}
    return ReviewFacts(
        hazards=tuple(find_hazards(code)),
        state_changing_lines=lines,
        opaque_reasons=assessment.opaque_reasons,
        procedures=tuple(views),
    )


def procedure_view(
    name: str,
    body: str,
    read_only_flags: Mapping[str, bool],
    procedure_code: Mapping[str, str],
    grants: Mapping[str, ProcedureGrant],
    granted_code: Mapping[str, str],
    conventions: ScanConventions,
) -> ProcedureView:
    """One stored procedure as a reviewer sees it: its body, whether it changes state, who granted it, and the
    diff from the granted version when the body changed since. For a procedure the code replays, and for the
    one a reused turn proposes. The body is shown and judged in its normal form, the text a replay runs."""
    body = normalize_code(body)
    verdict = assess_read_only(body, read_only_flags, procedure_code, conventions)
    grant = grants.get(name)
    current = hash_of_normal_form(body)
    changed = grant is not None and grant.code_hash != current
    diff = ""
    if changed and grant is not None and grant.code_hash in granted_code:
        diff = code_diff(normalize_code(granted_code[grant.code_hash]), body, f"{name} (granted)", f"{name} (now)")
    return ProcedureView(
        name=name, code=body, code_hash=current, read_only=verdict.read_only,
        state_changing=verdict.state_changing, granted_to=grant.granted_by if grant else None,
        changed_since_grant=changed, diff_from_granted=diff, hazards=tuple(find_hazards(body)),
    )


def code_diff(before: str, after: str, before_label: str, after_label: str) -> str:
    """A unified diff of two versions of code, bounded to ``MAX_DIFF_LINES``."""
    # Lines as Python reads them: split at line feeds only (splitlines also breaks at form feeds and Unicode
    # separators, which Python does not, so a diff drew lines the code does not have).
    lines = list(difflib.unified_diff(before.split("\n"), after.split("\n"), before_label, after_label,
                                      lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
    return "\n".join(lines)
