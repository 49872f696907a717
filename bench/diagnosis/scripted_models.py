"""Scripted stand-ins for the models the diagnosis harness measures, answering over the real HTTP wire.

Both read only what the product sends the model (the diagnosis prompt), never the held-out truth.

* `capable` — a model that reasons from the prompt's evidence, and over-eagerly: it keeps the ranking's
  first candidate unless a lower candidate has distinctive evidence the first lacks — clues of the task
  whose stored evidence points mostly at it (a share of at least one half, however few incidents) and
  more than at the first — and that evidence outweighs the first candidate's own distinctive evidence.
  It then overrides with a reason that names those clues, at a confidence that grows with the lead; it
  does not hold itself to the prompt's stricter rule for defining clues, which the product enforces.
  Its exploration code calls one read-only tool.
* `reckless` — the failure modes measured with the offline model: it answers a candidate other than the
  first, alternately at confidence 0.0 and at 1.0 with a reason that names no evidence, and its
  "investigation" is a bare literal. A product whose final answer follows the model would score below
  the ranking with it.
"""

from __future__ import annotations

import json

from tests.analysis.answers import analysis_handler, explore_with, shares
from tests.support.scripted_llm import ChatRequest, Handler

DISTINCTIVE_SHARE = 0.5


def distinctive(candidate: dict, other: dict) -> dict[str, float]:
    """The candidate's clues that point mostly at it, and more than at `other`, with their shares."""
    theirs = shares(other.get("matched_clues") or {})
    return {name: share for name, share in shares(candidate.get("matched_clues") or {}).items()
            if share >= DISTINCTIVE_SHARE and share > theirs.get(name, 0.0)}


def capable_diagnosis(request: ChatRequest) -> dict:
    ask = json.loads(request.first_user)
    candidates = ask.get("candidates") or []
    if not candidates:
        return {"cause": "novel", "confidence": 0.5, "reason": "no stored cause matches any clue of the task",
                "cited_clues": [n["symptom"] for n in ask.get("novel_symptoms", [])],
                "explanation": "none of the stored causes is linked to this task's clues"}
    first = candidates[0]
    best, best_lead, best_clues = first, 0.0, {}
    for other in candidates[1:]:
        theirs = distinctive(other, first)
        lead = sum(theirs.values()) - sum(distinctive(first, other).values())
        if lead > best_lead:
            best, best_lead, best_clues = other, lead, theirs
    if best is first or best_lead < DISTINCTIVE_SHARE:
        return {"cause": first["name"], "confidence": 0.7,
                "reason": "the ranking's first candidate is not contradicted by any distinctive clue",
                "cited_clues": list(first.get("matched_clues") or {})[:3],
                "explanation": f"{first['name']} is supported by {first['breadth']} kinds of clue"}
    cited = sorted(best_clues, key=lambda name: -best_clues[name])[:3]
    return {"cause": best["name"], "confidence": round(min(0.95, 0.8 + best_lead / 10), 2),
            "reason": f"{', '.join(cited)} point mostly at {best['name']} and not at {first['name']}",
            "cited_clues": cited,
            "explanation": f"{best['name']} explains the task's distinctive clues; {first['name']} does not"}


def reckless_diagnosis(request: ChatRequest) -> dict:
    ask = json.loads(request.first_user)
    candidates = ask.get("candidates") or []
    task_id = int(ask["task"].get("jediTaskID") or 0)
    if len(candidates) < 2:
        return {"cause": "novel", "confidence": 1.0, "reason": "", "cited_clues": [], "explanation": ""}
    pick = candidates[1 + task_id % (len(candidates) - 1)]
    if task_id % 2:
        return {"cause": pick["name"], "confidence": 0.0, "reason": "", "cited_clues": [],
                "explanation": "the task failed"}
    return {"cause": pick["name"], "confidence": 1.0, "reason": "this is clearly a security incident at the site",
            "cited_clues": [c["name"] for c in ask["clues"][:2]], "explanation": "a security incident"}


def bare_literal(request: ChatRequest) -> dict:
    return {"code": "return {'status': 'investigated'}", "capability_gaps": []}


def capable_email(request: ChatRequest) -> str:
    """Follows the e-mail instructions: the task, the cause and the diagnosis's resolution."""
    ask = json.loads(request.user)
    d = ask["diagnosis"]
    fix = f" To resolve it: {d['resolution']}." if d.get("resolution") else ""
    return f"Hello, task {ask['task_id']} failed because of {d['root_cause']}.{fix} Best regards, PanDA operations"


def reckless_email(request: ChatRequest) -> str:
    """Writes with confidence about things it was not told (the offline model's failure, on purpose)."""
    ask = json.loads(request.user)
    return (f"Dear user, task {ask['task_id']} was hit by a security incident at 03:17; the script run_fix.sh "
            f'will repair it. {{"supporting_evidence": []}}')


def capable() -> Handler:
    return analysis_handler(diagnose=capable_diagnosis, explore=explore_with(), email=capable_email)


def reckless() -> Handler:
    return analysis_handler(diagnose=reckless_diagnosis, explore=bare_literal, email=reckless_email)


SCRIPTED = {"capable": capable, "reckless": reckless}
