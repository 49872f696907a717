"""Scripted LLM answers for analysis: the accumulation answers plus a diagnosis that picks the
top-ranked candidate (so a "with LLM" figure measures plumbing, not a model) and a plain email."""

from __future__ import annotations

import json

from tests.support.answers import approve, canonical_labels, email_extraction
from tests.support.scripted_llm import ChatRequest, Reply, schema_router


def pick_top(confidence: float = 0.8):
    def answer(request: ChatRequest) -> dict:
        ask = json.loads(request.first_user)
        candidates = ask.get("candidates") or []
        if not candidates:
            return {"cause": "novel", "confidence": 0.2, "resolution": "", "explanation": "no known cause matches",
                    "supporting_evidence": [n["symptom"] for n in ask.get("novel_symptoms", [])]}
        top = candidates[0]
        return {"cause": top["name"], "confidence": confidence, "resolution": "",
                "explanation": f"top-ranked candidate with {top['breadth']} clue types",
                "supporting_evidence": top["matched_clues"][:3]}
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


def analysis_handler(diagnose=None, explore=None):
    return schema_router({"canonical_labels": canonical_labels, "email_extraction": email_extraction,
                          "review_verdict": approve, "analysis_diagnosis": diagnose or pick_top(),
                          "analysis_exploration_code": explore or explore_with(), None: email_text},
                         default=lambda r: Reply.error(400, f"unexpected schema {r.schema_name}"))
