"""A resolution email draft for the task owner: written by the LLM, from the stored knowledge if it cannot.

The draft is prose for a person, so it is asked for as free text. It is shown only when it passes the
grounding checks (`bamboo/analysis/grounding.py`: names the task and the cause, carries the stored
resolution, no markup, JSON or invented numbers and identifiers, bounded length). A failed call or a draft
that fails a check is replaced by a deterministic draft from the diagnosis, and the note says why.
"""

from __future__ import annotations

import json

from bamboo.analysis.contract import EmailDraft, EmailInput
from bamboo.analysis.grounding import EMAIL_MAX_WORDS, check_prose
from bamboo.analysis.ranked import subject, template_body
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError

SYSTEM = (
    "You write a short, professional email to the owner of a failed PanDA task explaining what went wrong "
    "and what to do. Name the task id and the diagnosed root cause, and give the diagnosis's resolution in "
    "its own words. Plain text, no markdown, no JSON, no greeting placeholders, at most 200 words. Do not "
    "invent facts, names or numbers beyond the diagnosis given."
)


async def draft_email(llm: LLMClient, inp: EmailInput) -> EmailDraft:
    # The model's own proposal stays out: a refused one must not reach the owner through the email.
    ask = {"task_id": inp.task_id, "task_name": inp.task_name, "diagnosis": inp.diagnosis.model_dump(exclude={"model"}),
           "operator_suggestions": inp.suggestions}
    if not inp.use_model:
        return EmailDraft(subject=subject(inp), body=template_body(inp), source="template",
                          note="the model budget is spent; template used")
    try:
        body = (await llm.text(system=SYSTEM, user=json.dumps(ask, default=str))).strip()
    except LLMError as exc:
        return EmailDraft(subject=subject(inp), body=template_body(inp), source="template",
                          note=f"LLM email draft failed ({exc.kind.value}: {str(exc)[:200]}); template used")
    if not body:
        return EmailDraft(subject=subject(inp), body=template_body(inp), source="template",
                          note="LLM returned an empty email; template used")
    check = check_prose(body, cause=inp.diagnosis.root_cause, given=json.dumps(ask, default=str),
                        resolution=inp.diagnosis.resolution, task_id=inp.task_id, max_words=EMAIL_MAX_WORDS)
    if not check.passed:
        return EmailDraft(subject=subject(inp), body=template_body(inp), source="template",
                          note=f"the model's email draft is not shown ({check.reason}); "
                               "the draft from the stored knowledge is")
    return EmailDraft(subject=subject(inp), body=body)
