"""Scripted LLM answers for accumulation: deterministic replies derived from the request itself,
so tests and benchmarks exercise the real client, prompts and schemas without a capable model."""

from __future__ import annotations

import json
import re

from tests.support.scripted_llm import ChatRequest, Reply, schema_router


def _payload(request: ChatRequest) -> dict:
    try:
        return json.loads(request.user)
    except (ValueError, TypeError):
        return {}


def canonical_labels(request: ChatRequest) -> dict:
    ask = _payload(request)
    return {"cause": ask.get("cause", ""), "resolution": ask.get("resolution", ""),
            "procedures": list(ask.get("procedures", []))}


def email_extraction(request: ChatRequest) -> dict:
    """A crude but deterministic reading: the first sentence mentioning a cause word becomes the cause."""
    email = _payload(request).get("email", "")
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", email) if s.strip()]
    cause = next((s for s in sentences if re.search(r"\b(cause|because|due to)\b", s, re.I)), "Unknown cause")
    fix = next((s for s in sentences if re.search(r"\b(fix|increase|resubmit|retry|changed)\b", s, re.I)), "Unknown fix")
    return {"cause": {"name": cause[:60], "description": cause}, "resolution": {"name": fix[:60], "description": fix},
            "procedures": [{"name": "Check the failed jobs' error summary", "description": "jobs summary", "depends_on": []}]}


def approve(_: ChatRequest) -> dict:
    return {"approved": True, "confidence": 0.9, "issues": [], "feedback": ""}


def reject(_: ChatRequest) -> dict:
    return {"approved": False, "confidence": 0.4, "issues": ["Cause node is too vague"], "feedback": "name the cause precisely"}


def accumulation_handler(review=approve):
    return schema_router({"canonical_labels": canonical_labels, "email_extraction": email_extraction,
                          "review_verdict": review},
                         default=lambda r: Reply.error(400, f"unexpected schema {r.schema_name}"))
