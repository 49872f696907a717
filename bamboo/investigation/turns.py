"""The LLM steps of a turn: classify the operator's intent, write the code, summarise the run.

Each step is one structured call with its own schema name, so a scripted endpoint (and an operator
reading traces) can tell them apart. The code step sees a tool block chosen by ``ToolSelector``: that
bounds the prompt, never the permissions (the allow-set comes from the trust policy over the whole
catalogue). In the automatic phase the block holds only read-only tools, so generation is read-only by
construction and the bridge's read-only allow-set is the backstop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from pydantic import BaseModel, Field

from bamboo.investigation.code import TASK_VARIABLE
from bamboo.llm.client import LLMClient
from bamboo.investigation.contract import (
    CodegenInput, CodegenResult, IntentInput, IntentResult, SummaryInput, SummaryResult,
)
from bamboo.tools.model import ToolSpec
from bamboo.llm.window import probe_served_model, remote_token_counter, resolve_context_window
from bamboo.tools.selection import RetrievalUnavailable, ToolSelector, offline_token_counter, truncated_block
from policy.signature import ScanConventions, scan_code

log = logging.getLogger(__name__)

INTENT_SCHEMA = "InvestigationIntent"
CODE_SCHEMA = "InvestigationCode"
SUMMARY_SCHEMA = "InvestigationSummary"

INTENT_SYSTEM = (
    "You route messages in a PanDA incident investigation. Answer intent=tool when the operator asks to look "
    "something up, check, fetch, compare, kill, retry or otherwise act through tools; intent=finding when the "
    "operator states what they found or believe (a cause, a fix, an observation). Give a confidence in [0, 1]."
)

CODE_SYSTEM = (
    "You write the body of an async Python function that investigates a PanDA task by calling tools. "
    "Call a tool as `await tools.<name>(arg=value)`; the task under investigation is already in the variable "
    f"`{TASK_VARIABLE}`. Return a small JSON-serialisable dict with what you found. Use only the tools listed. "
    "If no listed tool fits, return code as an empty string and say why in reason. "
    "List the observations that made you choose this step in trigger_signals."
)

CODE_USER = """Task: {task}
Symptom: {symptom}
Recent conversation:
{recent}

Request: {request}

Tools:
{tools}"""

SUMMARY_SYSTEM = (
    "Summarise for a PanDA operator what a tool run found, in two or three sentences, and state plainly if "
    "a call was refused or failed. result_summary is one line for the knowledge base."
)


RETRY_HINT = ("Write Python statements that call at least one listed tool as `await tools.<name>(...)`, "
              "or return code as an empty string and say why in reason.")


def unreviewable(code: str, tools: Sequence[ToolSpec]) -> str:
    """Why generated code is not worth a reviewer's time ("" when it is): it does not parse as Python, or it
    calls no tool (a bare literal or prose, as a small offline model writes), so running it could find
    nothing. Empty code is the model saying no tool fits, which is an answer, not a problem. Code whose
    tools the scan cannot name (dynamic access) is left to the review, which treats it as state-changing."""
    if not code.strip():
        return ""
    signature = scan_code(code, ScanConventions.for_tools(t.name for t in tools))
    parse = [r for r in signature.opaque_reasons if r.startswith("does not parse")]
    if parse:
        return f"it is not Python ({parse[0]})"
    if not signature.tools and not signature.opaque:
        return "it calls no tool, so running it could find nothing"
    return ""


class CodeProposal(BaseModel):
    code: str = Field(description="body of an async function, or empty when no tool fits")
    summary: str = Field(description="what the code does, for the reviewer")
    strategy: str = Field(description="a short name for the approach")
    trigger_signals: list[str] = Field(description="observations that led to this step")
    reason: str = Field(description="why no code was written, when code is empty")


class TurnModel:
    def __init__(self, llm: LLMClient, selector: ToolSelector, context_window: int = 0) -> None:
        """``context_window`` is the setting (0: ask the served model on the first code turn)."""
        self.llm = llm
        self.selector = selector
        self._window_setting = context_window
        self._window_known = False

    async def ensure_window(self) -> None:
        """Budget prompts against the served model's own window and tokenizer (asked once, lazily, so a
        model server that starts after the worker is still asked)."""
        if self._window_known:
            return
        served = await asyncio.to_thread(probe_served_model, self.llm.base_url, self.llm.model, self.llm.api_key)
        window, source = resolve_context_window(self._window_setting, served)
        count = remote_token_counter(served.tokenizer_url, offline_token_counter()) if served.tokenizer_url else None
        self.selector.configure(self.selector.config.model_copy(update={"context_window": window}), count)
        self._window_known = True
        log.info("prompts budgeted against a %d-token window (%s), tokenizer: %s", window, source,
                 "the model's" if count else "offline approximation")

    async def intent(self, inp: IntentInput) -> IntentResult:
        recent = "\n".join(inp.recent[-5:])
        return await self.llm.structured(
            system=INTENT_SYSTEM, user=f"Recent:\n{recent}\n\nMessage: {inp.text}", output=IntentResult,
            name=INTENT_SCHEMA,
        )

    async def code(self, inp: CodegenInput, tools: Sequence[ToolSpec]) -> CodegenResult:
        await self.ensure_window()
        shown = [t for t in tools if t.read_only] if inp.phase == "automatic" else list(tools)
        prompt = CODE_USER.format(
            task=inp.task_id if inp.task_id is not None else "none", symptom=inp.symptom or "not given",
            recent="\n".join(inp.recent[-5:]) or "(none)", request=inp.request, tools="{tools}",
        )
        try:
            block = await self.selector.select(prompt, inp.request, shown)
        except RetrievalUnavailable:
            if inp.phase == "interactive":
                raise
            block = await asyncio.to_thread(truncated_block, prompt, shown, self.selector.config, self.selector.count)
        proposal = await self.llm.structured(system=CODE_SYSTEM, user=block.text, output=CodeProposal, name=CODE_SCHEMA)
        problem = unreviewable(proposal.code, shown)
        if problem:  # asked once more, told why; a second miss is reported, never put before a reviewer
            again = f"{block.text}\n\nYour previous code was not usable: {problem}. {RETRY_HINT}"
            proposal = await self.llm.structured(system=CODE_SYSTEM, user=again, output=CodeProposal, name=CODE_SCHEMA)
            problem = unreviewable(proposal.code, shown)
            if problem:
                return CodegenResult(
                    code=None, summary=proposal.summary, strategy=proposal.strategy,
                    reason=f"the model wrote no code a person could review, twice (last: {problem})",
                    tools_shown=[*block.full, *block.compact], tools_omitted=list(block.omitted))
        code = proposal.code if proposal.code.strip() else None
        return CodegenResult(
            code=code, summary=proposal.summary, strategy=proposal.strategy,
            trigger_signals=list(proposal.trigger_signals), reason=proposal.reason if code is None else "",
            reason_by_model=code is None,
            tools_shown=[*block.full, *block.compact], tools_omitted=list(block.omitted),
        )

    async def summary(self, inp: SummaryInput) -> SummaryResult:
        payload = {
            "request": inp.request, "code_summary": inp.code_summary, "status": inp.status,
            "return_value": inp.return_value, "error": inp.error, "stdout": inp.stdout[-2000:],
            "refused_calls": inp.denied_calls,
        }
        return await self.llm.structured(
            system=SUMMARY_SYSTEM, user=json.dumps(payload, default=str)[:12000], output=SummaryResult,
            name=SUMMARY_SCHEMA,
        )

