"""The prompt budget comes from the served model's window and tokenizer, not from a constant.

Issue: with the offline model (4,096 tokens per llama.cpp slot) and a 519-tool catalogue every code-generation
call failed: the budget was computed against 8,192 tokens, and the error hinted at JSON-schema support.
Checked against the real llama.cpp server with a 2,048-token slot.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from bamboo.investigation.turns import TurnModel
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import FailureKind, LLMOutputError, classify
from bamboo.llm.local import LocalLLMServer
from bamboo.llm.window import DEFAULT_CONTEXT_WINDOW, ServedModel, probe_served_model, remote_token_counter, resolve_context_window
from bamboo.investigation.contract import CodegenInput
from bamboo.settings import Settings
from bamboo.tools.model import ToolSpec
from bamboo.tools.selection import SelectionConfig, ToolSelector
from bamboo.tools.vector_index import MemoryVectorIndex
from tests.tools.support import HashingEmbedder

SLOT = 2048


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def local_server():
    with LocalLLMServer(Settings(_env_file=None), port=_free_port(), ctx_per_slot=SLOT, parallel=1) as server:
        yield server


def catalogue(n: int = 519) -> list[ToolSpec]:
    return [ToolSpec(
        name=f"site_tool_{i:03d}",
        description=f"Report the state of computing site number {i}: queues, pilots, storage endpoints and downtimes.",
        input_schema={"type": "object", "properties": {"site": {"type": "string", "description": "site name"},
                                                       "hours": {"type": "integer", "description": "look-back"}},
                      "required": ["site"]},
        read_only=True, external_access=True) for i in range(n)]


def test_the_served_window_and_tokenizer_are_asked_of_the_server(local_server) -> None:
    served = probe_served_model(local_server.base_url, "local")
    assert served.context_window == SLOT and served.tokenizer_url
    count = remote_token_counter(served.tokenizer_url, lambda text: -1)
    text = "jobs fail with pilot error 1324: service unavailable"
    tokens = httpx.post(served.tokenizer_url, json={"content": text}).json()["tokens"]
    assert count(text) == len(tokens) > 0


def test_the_window_setting_wins_then_the_server_then_a_default() -> None:
    assert resolve_context_window(3000, ServedModel(context_window=SLOT)) == (3000, "setting")
    assert resolve_context_window(0, ServedModel(context_window=SLOT)) == (SLOT, "server")
    assert resolve_context_window(0, ServedModel()) == (DEFAULT_CONTEXT_WINDOW, "default")


async def test_code_generation_with_519_tools_fits_the_served_window(local_server) -> None:
    # What is tested is that the prompt fits the served window (a prompt over it is refused before any token
    # is generated); a short answer keeps the CPU model's generation, minutes at 512 tokens here, out of it.
    llm = LLMClient(base_url=local_server.base_url, model="local", max_tokens=24)
    selector = ToolSelector(MemoryVectorIndex(), HashingEmbedder(), "ns-window", SelectionConfig())
    model = TurnModel(llm, selector, context_window=0)
    try:
        await model.ensure_window()
        assert selector.config.context_window == SLOT
        prompt = "Request: which site is failing?\n\nTools:\n{tools}"
        block = await selector.select(prompt, "which site is failing", catalogue())
        measured = len(httpx.post(f"{local_server.base_url.removesuffix('/v1')}/tokenize",
                                  json={"content": block.text}).json()["tokens"])
        assert block.omitted and measured <= SLOT - selector.config.budget_margin
        try:
            result = await model.code(CodegenInput(session_id="s", phase="interactive",
                                                   request="which site is failing?"), catalogue())
        except LLMOutputError:
            result = None  # the tiny model answered off-schema: the prompt fit, which is what is tested
        if result is not None:
            assert result.tools_omitted
    finally:
        await llm.aclose()


def test_an_overflowing_prompt_says_to_fix_the_window_not_json_schema_support(local_server) -> None:
    reply = httpx.post(f"{local_server.base_url}/chat/completions", timeout=60,
                       json={"model": "local", "messages": [{"role": "user", "content": "word " * (SLOT * 2)}],
                             "max_tokens": 4})
    error = classify(httpx.HTTPStatusError("overflow", request=reply.request, response=reply),
                     endpoint=local_server.base_url, model="local")
    assert error.kind is FailureKind.CONTEXT_OVERFLOW and not error.retryable
    assert "BAMBOO_LLM_CONTEXT_WINDOW" in error.message and "JSON-schema" not in error.message
