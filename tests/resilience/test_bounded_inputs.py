"""Inputs whose size a tool, a server or an incident decides are bounded before the worker scans them.

A tool's error reaches a sandboxed script cut to a few KB, and the cut never shows part of a secret; an
errorDialog is classified and scanned only up to `MAX_DIALOG_SCAN`; an MCP answer's text is refused past
its cap and, when large, decoded off the loop. Structural checks only (sizes, what a spy saw), never
wall time.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import string
from typing import Any

import mcp.types as mt
import pytest

from bamboo.analysis.clues import extract_clues
from bamboo.audit import MemoryAuditSink
from bamboo.extraction import generic
from bamboo.extraction.panda import routing
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.mcp import external
from bamboo.mcp.config import McpServerConfig
from bamboo.models.incident import Incident
from bamboo.offload import in_thread
from bamboo.sandbox import bridge as bridge_module
from bamboo.sandbox.bridge import ToolBridge
from bamboo.sandbox.models import BridgeLimits
from bamboo.tools.model import ToolResult, ToolSpec

# Built at run time so the repository holds no literal key. The scrubber knows an access key id only
# whole (20 characters): any shorter head of it is plain text to it, so a cut inside it would show that head.
AWS_KEY_ID = "AKIA" + "Q3EGRDVWZ7XKBJ4N"
A_FEW_KB = 8 * 1024  # what "a few KB" of forwarded error means here, the tool name and the cut's mark aside
KEY = b"k" * 32
FILLER = "ERROR stage-in of a file failed at the site, will retry later; "


def _shows_part_of(secret: str, text: str) -> bool:
    """Whether ``text`` holds any head of ``secret`` long enough to be more than its well-known prefix."""
    return any(secret[:n] in text for n in range(8, len(secret) + 1))


class _FailingCaller:
    def __init__(self, error: str) -> None:
        self.error = error

    def list_tools(self) -> list[ToolSpec]:
        return [ToolSpec(name="t", read_only=True)]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.failure(self.error)


async def _forwarded_error(error: str) -> str:
    caller = _FailingCaller(error)
    bridge = ToolBridge(run_id="r", caller=caller, specs=caller.list_tools(), allowed=frozenset({"t"}),
                        audit=MemoryAuditSink(), limits=BridgeLimits())
    reply = await bridge.handle_call({"type": "call", "id": 1, "tool": "t", "args": {}, "token": bridge.token})
    assert reply["ok"] is False
    return reply["error"]


# --- A: a tool's error forwarded to the sandboxed script ------------------------------------------------


@pytest.mark.parametrize("key_at", [4096 - 19, 4096 - 10, 4096 - 1, 4096, 8192 - 10, 8192])
async def test_a_huge_tool_error_is_forwarded_cut_to_a_few_kb_without_any_part_of_a_secret(key_at):
    """A cut near where a few-KB cut falls, with a key straddling it: the script gets a few KB, told that
    more was cut, and no head of the key."""
    head = (FILLER * (key_at // len(FILLER) + 1))[: key_at - 1] + " "
    error = head + AWS_KEY_ID + " " + FILLER * (2_000_000 // len(FILLER))
    shown = await _forwarded_error(error)
    assert len(shown) <= A_FEW_KB + 100
    assert "more characters]" in shown
    assert not _shows_part_of(AWS_KEY_ID, shown)


async def test_nothing_near_where_the_error_stopped_being_read_is_shown():
    """Secrets that redact short (a long random token becomes one short mark) leave room under the cut for
    text up to where the scrubber stopped reading; a key cut there is judged by its head alone, so that
    stretch is never shown."""
    rnd = random.Random(7)
    token = "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(300))
    read_up_to = bridge_module.MAX_TOOL_ERROR_CHARS + bridge_module.TOOL_ERROR_SCAN_MARGIN
    key_at = read_up_to - 10
    tokens = (token + " ") * (key_at // (len(token) + 1))
    error = tokens + " " * (key_at - len(tokens)) + AWS_KEY_ID + " " + FILLER * 1000
    shown = await _forwarded_error(error)
    assert len(shown) <= bridge_module.MAX_TOOL_ERROR_CHARS + 100
    assert not _shows_part_of(AWS_KEY_ID, shown) and token[:24] not in shown


@pytest.mark.parametrize("shape", [
    '{"value": "%s", "note": "PAD", "name": "DB_PASSWORD"}',
    '[{"value": "%s", "description": "PAD", "name": "PANDA_PASSWORD"}]',
    '{"data": {"token": "%s"}, "pad": "PAD", "kind": "Secret"}',
])
@pytest.mark.parametrize("lead", [0, 2000, 4000])
async def test_a_value_whose_secrecy_is_said_past_the_window_is_not_shown(shape, lead):
    """What makes a value secret can come after it in its structure: a field named DB_PASSWORD 9 KB after the
    value. The whole error scrubbed hid the value; read to a few KB, the name was never read and the value
    was shown. Of an error not read whole, nothing from its first bracket on is shown."""
    secret = "hunter2-Qz"  # low entropy: a secret only by its context
    error = "E" * lead + " " + shape.replace("PAD", "x" * 9000) % secret
    shown = await _forwarded_error(error)
    assert secret not in shown and "more characters]" in shown


# --- B: the errorDialog, read by analysis (extract_clues), accumulation (prefetch_hints) and extraction --


@pytest.fixture
def classifier_inputs(monkeypatch) -> list[int]:
    """The length of every text routing hands the errorDialog classifier."""
    seen: list[int] = []
    real = routing.classify_error_dialog

    def spy(text: str):
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(routing, "classify_error_dialog", spy)
    return seen


BIG_DIALOG = "pilot:1212 Payload ran out of memory. " + "<a href='https://bigpanda.cern.ch/job?pandaid=1'>job 1</a> " * 20_000


def test_analysis_classifies_only_the_head_of_a_huge_dialog(classifier_inputs):
    clues = extract_clues({"jediTaskID": 7, "status": "broken", "errorDialog": BIG_DIALOG}, KEY)
    assert classifier_inputs and max(classifier_inputs) <= routing.MAX_DIALOG_SCAN
    [symptom] = clues.of_type("symptom")
    assert symptom.name == "InsufficientMemory"  # the head holds what defines the dialog


def test_accumulation_classifies_only_the_head_of_a_huge_dialog(classifier_inputs):
    incident = Incident(incident_id="big", email_text="resolved by raising memory",
                        task_data={"jediTaskID": 7, "status": "broken", "errorDialog": BIG_DIALOG})
    routed = routing.route_task_data(incident.task_data, KEY)
    PandaExtractionStrategy(llm=None, pseudonym_key=KEY).prefetch_hints(incident)  # type: ignore[arg-type]
    assert classifier_inputs and max(classifier_inputs) <= routing.MAX_DIALOG_SCAN
    [symptom] = [s for s in routed.symptoms if not s.name.startswith("TaskStatus")]
    assert len(symptom.props["raw_description"]) <= routing.MAX_DIALOG_SCAN


def test_the_generic_strategy_scans_only_the_head_of_a_huge_error_field(monkeypatch):
    seen: list[int] = []

    class SpyRe:
        def __getattr__(self, name: str) -> Any:
            real = getattr(re, name)

            def call(pattern: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
                seen.append(len(text) if isinstance(text, str) else 0)
                return real(pattern, text, *args, **kwargs)

            return call

    monkeypatch.setattr(generic, "re", SpyRe())
    clues = generic._generic_clues({"status": "failed", "error": "Disk quota exceeded " + "x " * 1_000_000})
    assert seen and max(seen) <= routing.MAX_DIALOG_SCAN
    assert clues.symptoms[0].name == "DiskQuotaExceededX"


async def test_the_extraction_prompt_quotes_only_the_head_of_a_huge_dialog():
    class StopAtPrompt(Exception):
        pass

    class CapturingLLM:
        prompt: str = ""

        async def structured(self, *, system: str, user: str, output: Any, name: str) -> Any:
            CapturingLLM.prompt = user
            raise StopAtPrompt

    incident = Incident(incident_id="big", email_text="resolved by raising memory",
                        task_data={"jediTaskID": 7, "status": "broken", "errorDialog": BIG_DIALOG})
    strategy = PandaExtractionStrategy(llm=CapturingLLM(), pseudonym_key=KEY)  # type: ignore[arg-type]
    with pytest.raises(StopAtPrompt):
        await strategy._from_email(incident, "", None)
    quoted = json.loads(CapturingLLM.prompt)["task"]["errorDialog"]
    assert quoted == BIG_DIALOG[: routing.MAX_DIALOG_SCAN]


# --- C: an MCP tool's answer -----------------------------------------------------------------------------


def _answer(text: str, *, is_error: bool = False) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], is_error=is_error)


class _FakeSession:
    def __init__(self, answer: mt.CallToolResult) -> None:
        self.answer = answer

    async def call_tool(self, name: str, arguments: dict[str, Any], read_timeout_seconds: Any = None) -> mt.CallToolResult:
        return self.answer


async def _call_through_client(answer: mt.CallToolResult) -> ToolResult:
    """`McpSessionClient.call_tool` as the worker runs it, on a session that answers ``answer``."""
    client = external.StdioMcpClient(McpServerConfig(name="fake", command="true"))
    client._session = _FakeSession(answer)  # type: ignore[assignment]
    client._owner = asyncio.create_task(asyncio.sleep(3600))
    client._specs = {"jobs": ToolSpec(name="jobs", read_only=True)}
    try:
        return await client.call_tool("jobs", {})
    finally:
        client._owner.cancel()


async def test_a_large_answer_is_decoded_in_the_offload_pool(monkeypatch):
    offloaded: list[str] = []

    async def spy(fn: Any, /, *args: Any, budget_s: float, what: str) -> Any:
        offloaded.append(what)
        return await in_thread(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(external, "in_thread", spy, raising=False)
    # Between DECODE_INLINE_CHARS and DECODE_THREAD_CHARS: larger ones go to a child (tests/mcp/test_answer_decoding.py)
    rows = [{"PandaID": i, "jobStatus": "failed", "computingSite": f"SITE_{i % 97}"} for i in range(2_000)]
    result = await _call_through_client(_answer(json.dumps(rows)))
    assert result.ok and result.data == rows
    assert len(offloaded) == 1 and "reading the tool's answer" in offloaded[0]


@pytest.mark.parametrize("is_error", [False, True])
async def test_an_answer_over_the_cap_is_refused_in_one_line(is_error):
    text = f"password={AWS_KEY_ID} " + "x" * 20_000_000  # the size of the review's repro
    for result in (await _call_through_client(_answer(text, is_error=is_error)), external.convert_result(_answer(text, is_error=is_error))):
        assert not result.ok and result.error is not None
        assert "\n" not in result.error and len(result.error) < 300 and "cap" in result.error
        assert not _shows_part_of(AWS_KEY_ID, result.error)
