"""The deterministic diagnosis: the ranking's top candidate, no model involved.

Pure (no service imports), so the AnalyzeTask workflow can fall back to it inside Temporal's sandbox
when the LLM step fails, and the benchmark can score the ranking on its own.

Everything shown for a cause is read from the store: the resolution is the one most recorded for that
cause, with the incidents that recorded it, never text a model wrote. The confidence is the ranking's
margin — how far its top candidate is ahead of the runner-up — so it says how contested the ranking is
whatever the model answered. The e-mail draft built from that diagnosis is here too: it is the first
answer's draft, shown before (and whenever) the model's prose is not.
"""

from __future__ import annotations

from bamboo.analysis.contract import CandidateCause, Diagnosis, EmailDraft, EmailInput, Evidence

RANKING_BASIS = "ranking margin: the top candidate's share of the support of the top two"
ABSTAIN_BASIS = "no stored cause is linked to the task's defining evidence"
PILOT_CODE = "pilotErrorCode="


def ranking_confidence(candidates: list[CandidateCause]) -> float:
    """The top candidate's share of the support of the top two: 1.0 unopposed, 0.5 a tie.

    Below 0.5 when the top candidate leads on breadth (more kinds of clue) while the runner-up has more
    support: the ranking is then genuinely split, and the exploration threshold should see that.
    """
    if not candidates:
        return 0.0
    if len(candidates) == 1:
        return 1.0
    top, second = candidates[0].support, candidates[1].support
    if top + second <= 0:
        return 0.5
    return round(top / (top + second), 4)


def stored_resolution(candidate: CandidateCause) -> tuple[str, list[str]]:
    """The cause's most recorded resolution and the incidents that recorded it ("" when none is stored)."""
    if not candidate.resolutions:
        return "", []
    text = candidate.resolutions[0]
    return text, list(candidate.resolution_incidents.get(text, []))


def grounded_evidence(candidate: CandidateCause, limit: int = 5) -> list[str]:
    return [f"{m.type} {m.name} ({m.share:.0%} of its evidence)" for m in candidate.matched[:limit]]


def ranking_explanation(evidence: Evidence) -> str:
    top = evidence.candidates[0]
    return (f"top-ranked of {len(evidence.candidates)} candidates: {top.breadth} clue types, "
            f"support {top.support}, seen in {top.frequency} incidents")


def defining_clues(evidence: Evidence) -> list[str]:
    """What names a cause: the task's error symptom classes and pilot error codes (symptoms first)."""
    clues = evidence.clues.clues
    return ([c.name for c in clues if c.type == "symptom"]
            + [c.name for c in clues if c.type == "task_feature" and c.name.startswith(PILOT_CODE)])


def unlinked_defining(evidence: Evidence) -> list[str]:
    """The task's defining clues when no candidate is linked to any of them, else [].

    Then every candidate rests on weaker clues (the status, a VO, a core count) that incidents of many causes
    share: issue 30 saw "No site with enough memory" proposed at confidence 1.00 from vo=atlas and
    coreCount=1 for a task whose InsufficientMemory symptom no stored cause was linked to. Such candidates
    are the closest known causes, shown as suggestions; the diagnosis is "no known cause"."""
    defining = defining_clues(evidence)
    matched = {m.name for c in evidence.candidates for m in c.matched}
    return [] if not defining or matched.intersection(defining) else defining


def abstention(evidence: Evidence, unlinked: list[str], note: str = "") -> Diagnosis:
    closest = ", ".join(c.name for c in evidence.candidates[:3])
    return Diagnosis(
        root_cause=f"Novel: no known cause ({', '.join(unlinked)})", is_novel=True, confidence=0.0,
        source="ranking", note=note, confidence_basis=ABSTAIN_BASIS,
        explanation=(f"no stored cause is linked to the task's {', '.join(unlinked)}; the closest known causes "
                     f"({closest}) match only weaker clues that many incidents share, so they are suggestions, "
                     "not a diagnosis"),
        supporting_evidence=[f"{name}: no stored cause" for name in unlinked],
        ranking_confidence=ranking_confidence(evidence.candidates))


def ranking_diagnosis(evidence: Evidence, note: str = "") -> Diagnosis:
    """The deterministic answer: the top-ranked cause, its stored resolution, the ranking's margin."""
    if not evidence.candidates:
        return Diagnosis(root_cause=novel_label(evidence), is_novel=True, confidence=0.0, source="ranking",
                         explanation="no stored cause is linked to any clue of this task", note=note,
                         confidence_basis="no stored cause matches any clue")
    top = evidence.candidates[0]
    resolution, incidents = stored_resolution(top)
    margin = ranking_confidence(evidence.candidates)
    if evidence.operator_cause and evidence.operator_cause.lower() == top.name.lower():
        return Diagnosis(
            root_cause=top.name, confidence=1.0, resolution=resolution, resolution_incidents=incidents,
            explanation=f"an operator gave {top.name} as this task's cause", supporting_evidence=grounded_evidence(top),
            source="ranking", note=note, cause_source="operator",
            confidence_basis="an operator's verdict on this task", ranking_confidence=margin)
    unlinked = unlinked_defining(evidence)
    if unlinked:
        return abstention(evidence, unlinked, note)
    return Diagnosis(
        root_cause=top.name, confidence=margin, resolution=resolution, resolution_incidents=incidents,
        explanation=ranking_explanation(evidence), supporting_evidence=grounded_evidence(top),
        source="ranking", note=note, cause_source="ranking", confidence_basis=RANKING_BASIS,
        ranking_confidence=margin,
    )


def novel_label(evidence: Evidence) -> str:
    if evidence.novel:
        return "Novel: " + ", ".join(n.symptom for n in evidence.novel)
    return "Novel: no known cause matches"


def subject(inp: EmailInput) -> str:
    task = f"task {inp.task_id}" if inp.task_id is not None else "your task"
    return f"PanDA {task}: {inp.diagnosis.root_cause}"[:200]


def template_body(inp: EmailInput) -> str:
    d = inp.diagnosis
    lines = [
        "Hello,",
        "",
        f"We looked at {'task ' + str(inp.task_id) if inp.task_id is not None else 'your task'}"
        f"{' (' + inp.task_name + ')' if inp.task_name else ''}.",
        f"Most likely cause: {d.root_cause} (confidence {d.confidence:.0%}).",
    ]
    if d.explanation:
        lines.append(d.explanation)
    if d.supporting_evidence:
        lines += ["", "What points at it:"] + [f"- {e}" for e in d.supporting_evidence[:5]]
    if d.resolution:
        seen = f" (recorded for {', '.join(d.resolution_incidents[:3])})" if d.resolution_incidents else ""
        lines += ["", f"Suggested resolution{seen}: {d.resolution}"]
    if inp.suggestions:
        lines += ["", "Steps an operator may take for you:"] + [f"- {s}" for s in inp.suggestions]
    lines += ["", "Best regards,", "PanDA operations"]
    return "\n".join(lines)


def template_draft(inp: EmailInput, note: str = "") -> EmailDraft:
    """The draft from the stored knowledge alone (no model call)."""
    return EmailDraft(subject=subject(inp), body=template_body(inp), source="template", note=note)
