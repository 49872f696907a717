"""Scripted LLM answers for analysis: the accumulation answers plus a diagnosis that picks the
top-ranked candidate (so a "with LLM" figure measures plumbing, not a model) and a plain email.

The answers carry every field the diagnosis schema asks for; a field the product no longer asks for
(such as a model-written resolution) may be added by a test to prove it is ignored."""

from __future__ import annotations

import json

from tests.support.answers import approve, canonical_labels, email_extraction
from tests.support.scripted_llm import ChatRequest, Reply, schema_router


def pick_top(confidence: float = 0.8, **extra: object):
    def answer(request: ChatRequest) -> dict:
        ask = json.loads(request.first_user)
        candidates = ask.get("candidates") or []
        if not candidates:
            return {"cause": "novel", "confidence": 0.2, "reason": "no stored cause matches any clue",
                    "cited_clues": [n["symptom"] for n in ask.get("novel_symptoms", [])],
                    "explanation": "no known cause matches"}
        top = candidates[0]
        return {"cause": top["name"], "confidence": confidence, "reason": "the ranking's first candidate fits",
                "cited_clues": list(top["matched_clues"])[:3],
                "explanation": f"top-ranked candidate with {top['breadth']} clue types", **extra}
    return answer


def shares(matched: dict[str, list[float]] | list[str]) -> dict[str, float]:
    """A candidate's matched clues with their shares, from the prompt's {clue: [share, incidents]} (an older
    prompt's bare list of names counts each clue as fully shared)."""
    if isinstance(matched, dict):
        return {name: value[0] if isinstance(value, list) else value for name, value in matched.items()}
    return {name: 1.0 for name in matched}


def pick_runner_up(confidence: float, reason: str | None = None, cite_favouring: bool = True,
                   **extra: object):
    """A diagnosis that moves away from the ranking's top to the second candidate.

    By default the reason names, and the answer cites, the clues that point at the second candidate more
    than at the first (the evidence an override must rest on); `reason` replaces that reason with the
    given text, `cite_favouring=False` cites the first candidate's strongest clues instead.
    """
    def answer(request: ChatRequest) -> dict:
        ask = json.loads(request.first_user)
        first, second = ask["candidates"][:2]
        first_shares, second_shares = shares(first["matched_clues"]), shares(second["matched_clues"])
        favouring = [name for name, share in second_shares.items() if share > first_shares.get(name, 0.0)]
        cited = favouring[:3] if cite_favouring else list(first_shares)[:3]
        text = reason if reason is not None else (
            f"the clues {', '.join(cited)} point at {second['name']} more than at {first['name']}")
        return {"cause": second["name"], "confidence": confidence, "reason": text, "cited_clues": cited,
                "explanation": f"{second['name']} explains the clues better", **extra}
    return answer


def explore_with(tool: str = "get_task_jobs_summary"):
    """Investigation code calling one tool for the task (a state-changing one to test the refusal)."""
    def answer(request: ChatRequest) -> dict:
        ask = json.loads(request.first_user)
        return {"code": f"return await tools.{tool}(task_id={ask['task_id']})",
                "capability_gaps": [{"investigation": "compare with the site's recent downtime calendar",
                                     "suggested_tool_capability": "a site downtime lookup"}]}
    return answer


def email_text(request: ChatRequest) -> str:
    ask = json.loads(request.user)
    return f"Hello, task {ask['task_id']} failed because of: {ask['diagnosis']['root_cause']}. Best regards"


def analysis_handler(diagnose=None, explore=None, email=None):
    return schema_router({"canonical_labels": canonical_labels, "email_extraction": email_extraction,
                          "review_verdict": approve, "analysis_diagnosis": diagnose or pick_top(),
                          "analysis_exploration_code": explore or explore_with(), None: email or email_text},
                         default=lambda r: Reply.error(400, f"unexpected schema {r.schema_name}"))
