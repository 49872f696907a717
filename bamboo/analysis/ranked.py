"""The deterministic diagnosis: the ranking's top candidate, no model involved.

Pure (no service imports), so the AnalyzeTask workflow can fall back to it inside Temporal's sandbox
when the LLM step fails, and the benchmark can score the ranking on its own.
"""

from __future__ import annotations

from bamboo.analysis.models import Diagnosis, Evidence


def ranking_diagnosis(evidence: Evidence, note: str = "") -> Diagnosis:
    """The deterministic answer: the top-ranked cause, its ranking score as the confidence."""
    if not evidence.candidates:
        return Diagnosis(root_cause=novel_label(evidence), is_novel=True, confidence=0.0, source="ranking",
                         explanation="no stored cause is linked to any clue of this task", note=note)
    top = evidence.candidates[0]
    return Diagnosis(
        root_cause=top.name, confidence=top.score,
        resolution=top.resolutions[0] if top.resolutions else "",
        explanation=f"top-ranked of {len(evidence.candidates)} candidates: {top.breadth} clue types, "
                    f"support {top.support}, seen in {top.frequency} incidents",
        supporting_evidence=[f"{m.type} {m.name} ({m.share:.0%} of its evidence)" for m in top.matched[:5]],
        source="ranking", note=note,
    )


def novel_label(evidence: Evidence) -> str:
    if evidence.novel:
        return "Novel: " + ", ".join(n.symptom for n in evidence.novel)
    return "Novel: no known cause matches"
